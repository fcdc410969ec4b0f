"""The evaluation runner: every eval runs its cases here, and shares its reports.

Every eval in ``evals/`` has the same shape: **build** the cases, **run** them through this
runner, **score** the outputs with pure functions, **report** (tables, JSON, plots); as in
BFCL, scores are recomputed offline from saved outputs.

- Running: :func:`run_cases` (async ``generate(case)``, at most ``concurrency`` in flight,
  for model :class:`Endpoint` s), :func:`run_cases_sync`, :func:`map_cases` (synchronous,
  in the calling thread or a thread pool); finished cases go to a :class:`GenerationCache`
  (JSONL keyed by case id and generation settings) so a rerun resumes; failures are
  reported per case, not cached, and :func:`check_failures` turns too many into an
  :class:`EvalRunError`.
- Reports: :func:`side_by_side_table`, :func:`plot_variants`, :func:`write_json`,
  :func:`quantile` / :func:`latency_summary`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Generic, NoReturn, TypeVar

from langchain_core.caches import BaseCache
from langchain_core.messages import message_to_dict, messages_from_dict
from langchain_core.outputs import ChatGeneration, Generation
from langgraph.errors import GraphBubbleUp
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

T = TypeVar("T")

__all__ = [
    "DEFAULT_MAX_FAILED_SHARE",
    "Endpoint",
    "EvalRunError",
    "GenerationCache",
    "JsonlLLMCache",
    "RunResult",
    "cache_key",
    "check_failures",
    "latency_summary",
    "map_cases",
    "open_endpoint",
    "plot_variants",
    "print_table",
    "quantile",
    "release_connections",
    "run_cases",
    "run_cases_sync",
    "side_by_side_table",
    "write_json",
]

LOCAL_MODEL = "qwen2.5-coder-1.5b"
"""Model the embedded server loads when :attr:`Endpoint.base_url` is ``None`` and no
``model`` is given (:data:`toolguard_evals.local_model.DEFAULT_AGENT_MODEL`)."""

DEFAULT_MAX_FAILED_SHARE = 0.1
"""Share of cases whose generation may fail (endpoint errors) before a run counts as failed.

Above it, or when every case failed, the commands that run a model exit non-zero and say
why: a report built on a minority of the cases, or on none, is not a result."""


class EvalRunError(RuntimeError):
    """A run that produced no result worth reporting: no cases, or too many failed.

    The message says how many failed, the allowed share, and the first error (for the
    embedded server, a :class:`~toolguard_evals.local_model.LocalModelError` with its log tail).
    """


def check_failures(
    failed: Mapping[str, str],
    total: int,
    *,
    what: str = "cases",
    max_failed_share: float = DEFAULT_MAX_FAILED_SHARE,
) -> None:
    """Raise :class:`EvalRunError` when all ``total`` cases failed or too many did.

    Args:
        failed: ``case id -> error text`` of the cases whose generation raised (endpoint or
            model-server errors; wrong answers are not failures).
        total: Cases attempted, >= 0.
        what: Plural noun for the message ("episodes", "requests").
        max_failed_share: The largest share in ``[0, 1]`` of failed cases that still counts
            as a run; default :data:`DEFAULT_MAX_FAILED_SHARE`.

    Raises:
        EvalRunError: ``total`` is 0, every case failed, or ``len(failed) / total`` is above
            ``max_failed_share``.
        ValueError: ``max_failed_share`` outside ``[0, 1]`` or ``total`` < 0.
    """
    if not 0.0 <= max_failed_share <= 1.0:
        raise ValueError(f"max_failed_share must be in [0, 1], got {max_failed_share}")
    if total < 0:
        raise ValueError(f"total must be >= 0, got {total}")
    if total == 0:
        raise EvalRunError(f"no {what} to run: nothing was evaluated")
    n = len(failed)
    if n == 0:
        return
    share = n / total
    if n < total and share <= max_failed_share:
        return
    first_id, first_error = next(iter(failed.items()))
    head = (f"all {total} {what} failed" if n == total else
            f"{n} of {total} {what} failed ({share:.0%}, more than the allowed "
            f"{max_failed_share:.0%})")
    raise EvalRunError(f"{head}; the results would not mean anything.\n"
                       f"first error ({first_id}): {first_error}")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where generations come from.

    Attributes:
        base_url: An OpenAI-compatible endpoint (``http://host:8000/v1``); ``None`` starts
            the embedded llama.cpp server with :data:`LOCAL_MODEL` (or ``model``, a bundled
            name or GGUF path).
        model: Model id at ``base_url``; ``None`` takes the first id of ``GET /models``.
        temperature: Sampling temperature (0: greedy, reproducible on vLLM and llama.cpp).
        max_tokens: Tokens per completion at most; ``None`` for the server's default (the
            embedded server always caps at 512).
        timeout: Seconds per request, > 0.

    Raises:
        ValueError: ``timeout`` <= 0, ``temperature`` < 0 or ``max_tokens`` < 1.
    """

    base_url: str | None = None
    model: str | None = None
    temperature: float = 0.0
    max_tokens: int | None = None
    timeout: float = 60.0

    def __post_init__(self) -> None:
        if self.timeout <= 0:
            raise ValueError("timeout must be > 0 seconds")
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1 (or None)")

    def settings(self) -> dict[str, Any]:
        """The generation settings that go into cache keys (JSON-able).

        The endpoint URL is left out when a model id is given, so the same model served
        elsewhere (another replica, a router) reuses the cache; without a model id the URL
        stands in for it.
        """
        if self.base_url is None:
            model = f"local:{self.model or LOCAL_MODEL}"
        else:
            model = self.model or f"first-model-at:{self.base_url}"
        return {"model": model, "temperature": self.temperature, "max_tokens": self.max_tokens}


@contextmanager
def open_endpoint(endpoint: Endpoint) -> Iterator[BaseChatModel]:
    """A LangChain chat model for ``endpoint``; starts and stops the embedded server.

    Yields:
        A ``ChatOpenAI`` (``LlamaCppChatOpenAI`` for the embedded server).

    Raises:
        toolguard_evals.local_model.LocalModelError: The embedded server did not start, or no
            model id could be read from ``GET {base_url}/models``.
        FileNotFoundError: The local model is not installed (the message names the pip
            command).
    """
    from toolguard_evals.local_model import LocalModelServer, chat_model_for

    if endpoint.base_url is None:
        with LocalModelServer(endpoint.model or LOCAL_MODEL) as server:
            yield server.chat_model(max_tokens=endpoint.max_tokens or 512,
                                    timeout=endpoint.timeout)
        return
    chat = chat_model_for(endpoint.base_url, endpoint.model,
                          temperature=endpoint.temperature, request_timeout=endpoint.timeout,
                          max_tokens=endpoint.max_tokens, max_retries=2)
    assert chat is not None  # base_url is set
    yield chat


async def release_connections(model: object) -> None:
    """Close the pooled HTTP connections of a ``ChatOpenAI``'s async client (best effort).

    langchain-openai shares one httpx ``AsyncClient`` per endpoint between instances; its
    keep-alive connections belong to the event loop that opened them, and after
    ``asyncio.run`` returns they would be garbage-collected with a ``ResourceWarning``.
    Closing the pool (not the client) ends them; the pool stays usable for a later loop.
    """
    client = getattr(getattr(model, "root_async_client", None), "_client", None)
    pool = getattr(getattr(client, "_transport", None), "_pool", None)
    if pool is not None and hasattr(pool, "aclose"):
        with contextlib.suppress(Exception):
            await pool.aclose()


BOOKKEEPING_KEYS: Final = ("usage_metadata", "response_metadata")
"""Message fields that say how a reply was produced (token counts, cost), not what it says."""


def strip_bookkeeping(value: Any) -> Any:
    """``value`` (parsed JSON) without :data:`BOOKKEEPING_KEYS` at any depth."""
    if isinstance(value, dict):
        return {k: strip_bookkeeping(v) for k, v in value.items() if k not in BOOKKEEPING_KEYS}
    if isinstance(value, list):
        return [strip_bookkeeping(v) for v in value]
    return value


class JsonlLLMCache(BaseCache):
    """LangChain's model cache (``ChatOpenAI(cache=...)``) kept in a :class:`GenerationCache`.

    A chat model with this cache answers a request it already sent (the same messages, and
    the same ``llm_string``: model, sampling settings and bound tools) from the file instead
    of the endpoint, so runs that share a first request share its reply, and a rerun
    resumes.  Entries hold the message as ``message_to_dict`` writes it.

    Args:
        path: The JSONL file; ``None`` keeps entries in memory only.
    """

    def __init__(self, path: Path | str | None = None) -> None:
        self.store = GenerationCache(path)
        self.hits = 0
        self.misses = 0

    @staticmethod
    def _key(prompt: str) -> str:
        """The entry's key: the prompt's sha256, without the messages' bookkeeping.

        LangChain marks a reply served from a cache (its ``usage_metadata`` gets
        ``total_cost: 0``) and that reply goes back to the model in the next request of an
        agent's loop, so a key on the raw prompt would miss every request after an
        episode's first on a rerun.  A prompt whose messages carry ``usage_metadata`` or
        ``response_metadata`` is keyed without them (sorted JSON); any other prompt (a
        first request, a plain string) by its raw text, as before.
        """
        try:
            parsed = json.loads(prompt)
        except ValueError:
            parsed = None
        stripped = strip_bookkeeping(parsed)
        text = prompt if stripped == parsed else json.dumps(stripped, sort_keys=True)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def lookup(self, prompt: str, llm_string: str) -> Sequence[Generation] | None:
        out = self.store.get(self._key(prompt), {"llm": stable_llm_string(llm_string)})
        if out is None:
            self.misses += 1
            return None
        self.hits += 1
        return [_generation_from(g) for g in out["generations"]]

    def update(self, prompt: str, llm_string: str, return_val: Sequence[Generation]) -> None:
        self.store.put(self._key(prompt), {"llm": stable_llm_string(llm_string)},
                       {"generations": [_generation_record(g) for g in return_val]})

    def clear(self, **kwargs: Any) -> None:
        """Forget the entries in memory (the file is kept)."""
        self.store = GenerationCache(None)


_TRANSPORT_KWARGS: Final = frozenset({
    "openai_api_base", "base_url", "openai_api_key", "api_key", "openai_proxy",
    "request_timeout", "timeout", "max_retries", "default_headers", "default_query",
    "http_client", "http_async_client",
})
"""Chat-model settings that say how a request travels, not what the model answers."""


def stable_llm_string(llm_string: str) -> str:
    """LangChain's ``llm_string`` without the endpoint's address, key, timeout and retries.

    LangChain keys its model cache on the model's serialized settings, which include the
    server's URL: a local server on a fresh port would miss every entry of an earlier run.
    The model name, sampling settings, stop words and bound tools are kept.  A string that
    is not LangChain's ``<json>---<params>`` form is returned unchanged.
    """
    head, sep, params = llm_string.partition("---")
    try:
        settings = json.loads(head)
    except ValueError:
        return llm_string
    kwargs = settings.get("kwargs") if isinstance(settings, dict) else None
    if not isinstance(kwargs, dict):
        return llm_string
    settings = {**settings, "kwargs": {k: v for k, v in kwargs.items()
                                       if k not in _TRANSPORT_KWARGS}}
    return json.dumps(settings, sort_keys=True) + sep + params


def _generation_record(generation: Generation) -> dict[str, Any]:
    record: dict[str, Any] = {"text": generation.text,
                              "generation_info": generation.generation_info}
    if isinstance(generation, ChatGeneration):
        record["message"] = message_to_dict(generation.message)
    return record


def _generation_from(record: Mapping[str, Any]) -> Generation:
    info = record.get("generation_info")
    if "message" in record:
        (message,) = messages_from_dict([record["message"]])
        return ChatGeneration(message=message, generation_info=info)
    return Generation(text=str(record.get("text") or ""), generation_info=info)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=str)


def cache_key(case_id: str, settings: Mapping[str, Any]) -> str:
    """SHA-256 hex digest of the case id and the canonical JSON of ``settings``."""
    return hashlib.sha256(_canonical([case_id, dict(settings)]).encode("utf-8")).hexdigest()


class GenerationCache:
    """Finished generations, one JSON line per case: ``{key, case_id, settings, output}``.

    The file is append-only; a later line for the same key wins.  Lines that do not parse
    (a run killed mid-write) are skipped and counted in :attr:`skipped_lines`.  Safe to
    share between threads and tasks of one process.

    Args:
        path: The JSONL file (created with its folder on the first :meth:`put`); ``None``
            keeps generations in memory only.
    """

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.skipped_lines = 0
        self._records: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        if self.path is not None and self.path.exists():
            with self.path.open(encoding="utf-8") as fh:
                for line in fh:
                    if not line.strip():
                        continue
                    try:
                        record = json.loads(line)
                        self._records[str(record["key"])] = record
                    except (json.JSONDecodeError, KeyError, TypeError):
                        self.skipped_lines += 1

    def __len__(self) -> int:
        return len(self._records)

    def get(self, case_id: str, settings: Mapping[str, Any]) -> dict[str, Any] | None:
        """The saved output of ``case_id`` under ``settings``, or ``None``."""
        record = self._records.get(cache_key(case_id, settings))
        return None if record is None else dict(record["output"])

    def put(self, case_id: str, settings: Mapping[str, Any], output: Mapping[str, Any]) -> None:
        """Save ``output`` (JSON-able; other values are stored as ``str``) and flush it.

        Raises:
            TypeError: ``output`` is not a mapping.
        """
        if not isinstance(output, Mapping):
            raise TypeError(f"output must be a mapping, got {type(output).__name__}")
        record = {"key": cache_key(case_id, settings), "case_id": case_id,
                  "settings": dict(settings), "output": dict(output)}
        line = json.dumps(record, ensure_ascii=False, default=str)
        record = json.loads(line)  # what a reload would see
        with self._lock:
            self._records[record["key"]] = record
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a", encoding="utf-8") as fh:
                    fh.write(line + "\n")
                    fh.flush()

    def outputs(self, settings: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """``case_id -> output`` of every saved case generated under ``settings``."""
        want = _canonical(dict(settings))
        return {r["case_id"]: dict(r["output"]) for r in self._records.values()
                if _canonical(r["settings"]) == want}


@dataclass(slots=True)
class RunResult:
    """What :func:`run_cases` or :func:`map_cases` did.

    Attributes:
        outputs: ``case_id -> output`` for every finished case (cached and new), in the
            order of the cases.
        generated: Cases generated in this run.
        cached: Cases taken from the cache.
        failed: ``case_id -> "ExcType: message"`` for cases whose generation raised; not
            cached, so a rerun tries them again.
        seconds: Wall-clock seconds of the run.
        case_seconds: ``case_id -> seconds`` one ``generate`` call took, for each case
            generated in this run (the case's own time, not the wait for a slot).
    """

    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    generated: int = 0
    cached: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    case_seconds: dict[str, float] = field(default_factory=dict)

    def cases_per_second(self) -> float:
        """Generated cases per wall-clock second (0.0 when nothing was generated)."""
        return self.generated / self.seconds if self.generated and self.seconds > 0 else 0.0


class _Ledger(Generic[T]):
    """The bookkeeping every entry point shares: ids, cache hits, outputs, failures, timing.

    ``cache=None`` keeps outputs as ``generate`` returned them (any values); with a cache
    they are saved and kept as a reload would see them (JSON).
    """

    def __init__(self, cases: Sequence[T], case_id: Callable[[T], str],
                 settings: Mapping[str, Any], cache: GenerationCache | None,
                 raise_errors: bool) -> None:
        self.started = time.perf_counter()
        self.ids = [case_id(c) for c in cases]
        if len(set(self.ids)) != len(self.ids):
            dupes = sorted(i for i, n in Counter(self.ids).items() if n > 1)[:5]
            raise ValueError(f"duplicate case ids: {dupes}")
        self.settings = settings
        self.cache = cache
        self.raise_errors = raise_errors
        self.result = RunResult()
        self.done: dict[str, dict[str, Any]] = {}
        self.todo: list[tuple[str, T]] = []
        for cid, case in zip(self.ids, cases, strict=True):
            hit = cache.get(cid, settings) if cache is not None else None
            if hit is None:
                self.todo.append((cid, case))
            else:
                self.done[cid] = hit
                self.result.cached += 1

    def keep(self, cid: str, output: Mapping[str, Any], seconds: float) -> None:
        """Record a finished case (``TypeError`` for an output that is not a mapping)."""
        if not isinstance(output, Mapping):
            raise TypeError(f"generate returned {type(output).__name__}, not a mapping")
        if self.cache is not None:
            self.cache.put(cid, self.settings, output)
            self.done[cid] = self.cache.get(cid, self.settings) or dict(output)
        else:
            self.done[cid] = output  # type: ignore[assignment]
        self.result.generated += 1
        self.result.case_seconds[cid] = seconds

    def fail(self, cid: str, exc: Exception) -> None:
        """Record a case whose generation raised (not cached: a rerun tries it again)."""
        self.result.failed[cid] = f"{type(exc).__name__}: {exc}"[:6000]

    def settle(self, cid: str, get: Callable[[], tuple[Mapping[str, Any], float]]) -> None:
        """Keep ``get()``'s ``(output, seconds)``, or record (or re-raise) its exception.

        The graph's control signals (``GraphBubbleUp``: interrupts) always propagate.
        """
        try:
            output, seconds = get()
            self.keep(cid, output, seconds)
        except GraphBubbleUp:
            raise
        except Exception as exc:  # a failed case must not stop the run
            if self.raise_errors:
                raise
            self.fail(cid, exc)

    def finish(self) -> RunResult:
        """The result: outputs in case order, the run's wall-clock seconds."""
        self.result.outputs = {cid: self.done[cid] for cid in self.ids if cid in self.done}
        self.result.seconds = time.perf_counter() - self.started
        return self.result


@contextmanager
def _progress_bar(description: str, total: int, completed: int,
                  enabled: bool) -> Iterator[Callable[[], None]]:
    """A rich bar on stderr; yields ``advance()`` (one case done; redrawn at most 10 times/s)."""
    if not enabled:
        yield lambda: None
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(description, total=total, completed=completed)
        count, last = completed, 0.0

        def advance() -> None:
            nonlocal count, last
            count += 1
            now = time.monotonic()
            if now - last >= 0.1 or count == total:
                bar.update(task, completed=count)
                last = now

        yield advance
        bar.update(task, completed=count)


def _timed(generate: Callable[[T], Mapping[str, Any]], case: T) -> tuple[Mapping[str, Any], float]:
    """``(generate(case), seconds it took)``."""
    t0 = time.perf_counter()
    output = generate(case)
    return output, time.perf_counter() - t0


def _raise(exc: Exception) -> NoReturn:
    raise exc


async def _timed_async(generate: Callable[[T], Awaitable[Mapping[str, Any]]],
                       case: T) -> Callable[[], tuple[Mapping[str, Any], float]]:
    """``generate(case)`` awaited and timed, as the thunk :meth:`_Ledger.settle` takes.

    An exception is kept in the thunk, so ``settle`` handles it as for synchronous cases.
    """
    t0 = time.perf_counter()
    try:
        output = await generate(case)
    except Exception as exc:
        return functools.partial(_raise, exc)
    seconds = time.perf_counter() - t0
    return lambda: (output, seconds)


async def run_cases(
    cases: Sequence[T],
    generate: Callable[[T], Awaitable[Mapping[str, Any]]],
    *,
    case_id: Callable[[T], str],
    settings: Mapping[str, Any],
    cache: GenerationCache | None = None,
    concurrency: int = 4,
    description: str = "generating",
    progress: bool = True,
    raise_errors: bool = False,
) -> RunResult:
    """Generate an output for every case not in ``cache``, ``concurrency`` at a time.

    Args:
        cases: The cases, in report order.  Case ids must be unique.
        generate: ``async (case) -> output``; the output must be a JSON-able mapping.
        case_id: The case's id (cache key together with ``settings``).
        settings: Everything that changes the generation (model, temperature, guarded or
            not, prompt format, ...); JSON-able.
        cache: Where finished cases are saved and looked up; ``None``: nothing is saved.
        concurrency: Cases in flight at most, >= 1.
        description: Progress-bar label.
        progress: Show a rich progress bar on stderr.
        raise_errors: Re-raise the first exception of ``generate`` (debugging) instead of
            recording it in :attr:`RunResult.failed`.

    Returns:
        A :class:`RunResult`.  Generation errors do not raise; they are in ``failed``.

    Raises:
        ValueError: ``concurrency`` < 1 or duplicate case ids.
        langgraph.errors.GraphBubbleUp: A graph interrupt raised by ``generate``.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    ledger = _Ledger(cases, case_id, settings,
                     cache if cache is not None else GenerationCache(None), raise_errors)
    semaphore = asyncio.Semaphore(concurrency)
    with _progress_bar(description, len(ledger.ids), ledger.result.cached,
                       progress) as advance:

        async def one(cid: str, case: T) -> None:
            async with semaphore:
                try:
                    ledger.settle(cid, await _timed_async(generate, case))
                finally:
                    advance()

        await asyncio.gather(*(one(cid, case) for cid, case in ledger.todo))
    return ledger.finish()


def run_cases_sync(
    cases: Sequence[T],
    generate: Callable[[T], Awaitable[Mapping[str, Any]]],
    **kwargs: Any,
) -> RunResult:
    """:func:`run_cases` from synchronous code (CLI commands, scripts).

    Raises:
        RuntimeError: Called from inside a running event loop (await :func:`run_cases`).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run_cases(cases, generate, **kwargs))
    raise RuntimeError("run_cases_sync called inside an event loop; await run_cases instead")


def map_cases(
    cases: Sequence[T],
    generate: Callable[[T], Mapping[str, Any]],
    *,
    case_id: Callable[[T], str],
    settings: Mapping[str, Any] | None = None,
    cache: GenerationCache | None = None,
    concurrency: int = 1,
    description: str = "running",
    progress: bool = True,
    raise_errors: bool = False,
) -> RunResult:
    """:func:`run_cases` for a synchronous ``generate``, from synchronous code.

    ``concurrency=1`` runs the cases one after another in the calling thread: no event
    loop, no thread, a few microseconds of bookkeeping per case, for CPU-bound
    deterministic cases (the detector suite's guard checks, the fault replays).
    ``concurrency > 1`` runs them in a pool of that many threads, for synchronous graphs
    that wait on a model endpoint (``graph.stream`` / ``invoke``).

    Args:
        cases: The cases, in report order.  Case ids must be unique.
        generate: ``(case) -> output``, a mapping; JSON-able when ``cache`` is given.
        case_id: The case's id.
        settings: Everything that changes the generation (the cache key with the id);
            required with ``cache``.
        cache: Where finished cases are saved and looked up; ``None``: nothing is saved and
            outputs are kept as returned (any values, no JSON round trip).
        concurrency: Cases in flight at most, >= 1 (threads above 1).
        description: Progress-bar label.
        progress: Show a rich progress bar on stderr.
        raise_errors: Re-raise the first exception of ``generate`` (deterministic suites,
            where an exception is a bug) instead of recording it in
            :attr:`RunResult.failed`.

    Returns:
        A :class:`RunResult`; ``case_seconds`` holds each case's ``generate`` time.

    Raises:
        ValueError: ``concurrency`` < 1, duplicate case ids, or ``cache`` without
            ``settings``.
        langgraph.errors.GraphBubbleUp: A graph interrupt raised by ``generate``.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    if cache is not None and settings is None:
        raise ValueError("a cache needs settings (they key the cached outputs)")
    ledger = _Ledger(cases, case_id, settings or {}, cache, raise_errors)
    with _progress_bar(description, len(ledger.ids), ledger.result.cached,
                       progress) as advance:
        if concurrency == 1:
            for cid, case in ledger.todo:
                ledger.settle(cid, functools.partial(_timed, generate, case))
                advance()
        else:
            with ThreadPoolExecutor(max_workers=concurrency,
                                    thread_name_prefix="map_cases") as pool:
                futures = {pool.submit(_timed, generate, case): cid
                           for cid, case in ledger.todo}
                try:
                    for future in as_completed(futures):
                        ledger.settle(futures[future], future.result)
                        advance()
                except BaseException:
                    pool.shutdown(wait=True, cancel_futures=True)
                    raise
    return ledger.finish()


# -- reports -------------------------------------------------------------------------


def _fmt(value: float | None, digits: int) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return f"{value:.{digits}f}"


def side_by_side_table(
    title: str,
    rows: Mapping[str, Mapping[str, float | None]],
    *,
    columns: Sequence[str],
    digits: int = 1,
) -> Table:
    """A rich table: one row per metric, one column per variant.

    Args:
        title: Table title.
        rows: ``metric -> {column: value}``; a missing or ``None`` value prints ``-``.
        columns: Column order, e.g. ``("unguarded", "guarded")``.
        digits: Decimals shown.
    """
    table = Table(title=title)
    table.add_column("metric")
    for col in columns:
        table.add_column(col, justify="right")
    for metric, values in rows.items():
        table.add_row(metric, *(_fmt(values.get(col), digits) for col in columns))
    return table


def print_table(table: Table) -> None:
    """Print a table to stdout (wide enough not to wrap metric names)."""
    Console(width=max(100, Console().width)).print(table)


def plot_variants(
    metrics: Mapping[str, Mapping[str, float | None]],
    path: Path | str,
    *,
    title: str,
    ylabel: str = "percent",
) -> Path:
    """Write a grouped bar chart (PNG or any format matplotlib infers from the suffix).

    Args:
        metrics: ``metric -> {variant: value}``; ``None`` values are drawn as 0 and marked
            ``n/a``.
        path: Output file; its folder is created.
        title: Chart title.
        ylabel: Y-axis label.

    Returns:
        ``path`` as a ``Path``.

    Raises:
        ImportError: matplotlib is not installed (``pip install 'toolguard-agents[evals]'``).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("plots need matplotlib: pip install 'toolguard-agents[evals]'") from exc
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    names = list(metrics)
    variants: list[str] = []
    for values in metrics.values():
        variants += [v for v in values if v not in variants]
    width = 0.8 / max(1, len(variants))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(names) + 2), 4.0))
    try:
        for i, variant in enumerate(variants):
            xs = [j + (i - (len(variants) - 1) / 2) * width for j in range(len(names))]
            raw = [metrics[m].get(variant) for m in names]
            bars = ax.bar(xs, [v or 0.0 for v in raw], width, label=variant)
            for bar, v in zip(bars, raw, strict=True):
                ax.annotate("n/a" if v is None else f"{v:.1f}",
                            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                            ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out)
    finally:
        plt.close(fig)
    return out


def write_json(path: Path | str | None, payload: Mapping[str, Any]) -> None:
    """Write ``payload`` as indented JSON (folders created); ``None`` writes nothing."""
    if path is None:
        return
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2, ensure_ascii=False, default=str) + "\n",
                   encoding="utf-8")


def quantile(values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile ``q`` in ``[0, 1]`` of ``values`` (0.0 when empty).

    The benchmarks' p50/p99: the value at rank ``round(q * (n - 1))`` of the sorted list.

    Raises:
        ValueError: ``q`` outside ``[0, 1]``.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def latency_summary(times_ms: Sequence[float], digits: int = 3) -> dict[str, float]:
    """``{"p50", "p99", "mean"}`` of latencies in milliseconds, rounded to ``digits``."""
    mean = sum(times_ms) / len(times_ms) if times_ms else 0.0
    return {"p50": round(quantile(times_ms, 0.5), digits),
            "p99": round(quantile(times_ms, 0.99), digits), "mean": round(mean, digits)}
