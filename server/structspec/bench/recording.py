"""Recordings of greedy generations, the replay's input (``bench/replay.py``).

A recording (``Recording``, JSON) holds, per prompt, the prompt's token ids,
the greedy tokens that followed (the end-of-generation token included when the
model chose it) and the margin of the row that chose each one, plus the cost
table and the model's file name. It holds no weights: the replay opens the
same GGUF only for its tokenizer (the sources read text), and never decodes.

``record`` decodes a suite greedily into one; ``recording_from_trace`` reads
one from the language server's trace (``completion/trace.py``): one prompt
per generation, in the server's order, with what the editor's draft sources
read (the text after the cursor, the document's latest generations, the other
buffers), the generation's own options and its kind (``completion``,
``cancelled`` by an edit, ``pregeneration``).

The recorded output does not depend on the cost table (it is greedy), so a
recording replays under any other table too (``load_cost_table``,
``--cost-table FILE``): what another machine or thread count would predict for
the same choices of the model.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from structspec.engine.control import CostModel
from structspec.engine.decode import Engine, GenerationOptions
from structspec.files import MIB, read_bounded_text
from structspec.model.base import Model, Rows

#: Bump when the recording's layout changes (format 1, without the editor's
#: fields, is still read).
RECORDING_FORMAT = 2
READABLE_FORMATS = (1, 2)
#: The largest recording, trace or cost table read (a recording of 40 prompts is 90 KB).
MAX_RECORDING_BYTES = 256 * MIB


class ReplayError(ValueError):
    """A recording that cannot be read or does not fit the model (one line for the user)."""


@dataclass(frozen=True)
class RecordedPrompt:
    """One prompt's greedy generation: ``output[i]`` was chosen with margin ``margins[i]``.

    The rest comes from an editor recording (empty otherwise): ``kind`` of
    generation, its own ``max_tokens`` (``None``: the recording's) and
    ``stop`` strings, the bytes token healing removed from the prompt's end
    (``healed``: the first output tokens reproduce them, and drafts are cut
    where they would not), and the draft sources' inputs (``DraftContext``).
    """

    id: str
    language: str | None
    prompt: tuple[int, ...]
    output: tuple[int, ...]
    margins: tuple[float, ...]
    kind: str = ""
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    suffix: tuple[int, ...] = ()
    recent: tuple[tuple[int, ...], ...] = ()
    corpus: tuple[tuple[int, ...], ...] = ()
    healed: bytes = b""


@dataclass(frozen=True)
class Recording:
    model: str
    threads: int
    max_tokens: int
    cost_ms: tuple[float, ...]
    prompts: tuple[RecordedPrompt, ...]

    def to_json(self) -> str:
        # The editor's token lists repeat from prompt to prompt: each is stored
        # once in ``sequences`` and named by its index.
        table: dict[tuple[int, ...], int] = {}

        def ref(seq: tuple[int, ...]) -> int:
            return table.setdefault(seq, len(table))

        prompts = []
        for p in self.prompts:
            item: dict[str, Any] = {
                "id": p.id,
                "language": p.language,
                "prompt": list(p.prompt),
                "output": list(p.output),
                "margins": [round(m, 4) for m in p.margins],
            }
            if p.kind:
                item["kind"] = p.kind
            if p.max_tokens is not None:
                item["max_tokens"] = p.max_tokens
            if p.stop:
                item["stop"] = list(p.stop)
            if p.healed:
                item["healed"] = p.healed.hex()
            if p.suffix:
                item["suffix"] = ref(p.suffix)
            if p.recent:
                item["recent"] = [ref(r) for r in p.recent]
            if p.corpus:
                item["corpus"] = [ref(c) for c in p.corpus]
            prompts.append(item)
        data = {
            "format": RECORDING_FORMAT,
            "model": self.model,
            "threads": self.threads,
            "max_tokens": self.max_tokens,
            "cost_ms": [round(v, 4) for v in self.cost_ms],
            "sequences": [list(seq) for seq in table],
            "prompts": prompts,
        }
        return json.dumps(data, separators=(",", ":")) + "\n"

    @classmethod
    def load(cls, path: str | Path) -> Recording:
        try:
            data = json.loads(read_bounded_text(path, MAX_RECORDING_BYTES))
            if data.get("format") not in READABLE_FORMATS:
                raise ReplayError(f"recording {path}: unknown format {data.get('format')!r}")
            table = [tuple(int(t) for t in seq) for seq in data.get("sequences", [])]
            prompts = tuple(
                RecordedPrompt(
                    str(p["id"]),
                    p.get("language"),
                    tuple(int(t) for t in p["prompt"]),
                    tuple(int(t) for t in p["output"]),
                    tuple(float(m) for m in p["margins"]),
                    kind=str(p.get("kind", "")),
                    max_tokens=int(p["max_tokens"]) if "max_tokens" in p else None,
                    stop=tuple(str(s) for s in p.get("stop", ())),
                    suffix=table[p["suffix"]] if "suffix" in p else (),
                    recent=tuple(table[i] for i in p.get("recent", ())),
                    corpus=tuple(table[i] for i in p.get("corpus", ())),
                    healed=bytes.fromhex(p.get("healed", "")),
                )
                for p in data["prompts"]
            )
            rec = cls(
                str(data["model"]),
                int(data["threads"]),
                int(data["max_tokens"]),
                tuple(float(v) for v in data["cost_ms"]),
                prompts,
            )
        except (OSError, ValueError, KeyError, TypeError, IndexError, RecursionError) as exc:
            if isinstance(exc, ReplayError):
                raise
            raise ReplayError(f"cannot read recording {path}: {exc}") from None
        for p in rec.prompts:
            if not p.prompt or len(p.output) != len(p.margins):
                raise ReplayError(f"recording {path}: prompt {p.id} is malformed")
        return rec


#: ``stop_reason`` of a traced generation that ended by itself; any other
#: (``cancelled``: the editor or an edit cut it short; ``context``) is
#: replayed up to its recorded tokens only.
_ENDED_BY_ITSELF = ("eos", "stop", "length")


def recording_from_trace(
    path: str | Path, *, model: str, cost_ms: Sequence[float], threads: int
) -> Recording:
    """An editor recording from a language server's trace (``completion/trace.py``).

    One prompt per traced generation that carries the replay's fields, in the
    trace's order (the planner's statistics carry from one to the next, as in
    the server). Ids are ``<line>/<kind>``.
    """
    sequences: dict[str, tuple[int, ...]] = {}
    prompts: list[RecordedPrompt] = []
    try:
        # A FIFO or a device named as the trace is refused, not waited on.
        lines = read_bounded_text(path, MAX_RECORDING_BYTES).splitlines()
        for number, line in enumerate(lines, 1):
            entry = json.loads(line)
            if "seq" in entry:
                sequences[str(entry["seq"])] = tuple(int(t) for t in entry["tokens"])
                continue
            if "margins" not in entry:
                continue  # traced without the replay's fields
            tokens = tuple(int(t) for t in entry["tokens"])
            end = entry.get("end")
            output = tokens + ((int(end),) if end is not None else ())
            ended = entry.get("stop_reason") in _ENDED_BY_ITSELF
            prompts.append(
                RecordedPrompt(
                    f"{number}/{entry['kind']}",
                    entry.get("language"),
                    tuple(int(t) for t in entry["prompt"]),
                    output,
                    tuple(float(m) for m in entry["margins"]),
                    kind=str(entry["kind"]),
                    max_tokens=int(entry["max_tokens"]) if ended else len(tokens),
                    stop=tuple(str(s) for s in entry.get("stop", ())),
                    suffix=sequences[entry["suffix"]],
                    recent=tuple(sequences[s] for s in entry.get("recent", ())),
                    corpus=tuple(sequences[s] for s in entry.get("corpus", ())),
                    healed=bytes.fromhex(entry.get("healed", "")),
                )
            )
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise ReplayError(f"cannot read trace {path}: {exc}") from None
    for p in prompts:
        if not p.prompt or len(p.output) != len(p.margins):
            raise ReplayError(f"trace {path}: generation {p.id} is malformed")
    top = max((p.max_tokens or 0 for p in prompts), default=0)
    return Recording(model, threads, top, tuple(cost_ms), tuple(prompts))


def load_cost_table(path: str | Path) -> CostModel:
    """A cost table from ``path``: the runtime's cache file (``{"ms": [...]}``) or a JSON list.

    ``ms[n - 1]`` is the time of a pass of ``n`` rows, as in ``CostModel``.
    """
    try:
        data = json.loads(read_bounded_text(path, MAX_RECORDING_BYTES))
        ms = data["ms"] if isinstance(data, dict) else data
        if not isinstance(ms, list):
            raise TypeError("not a list of times")
        return CostModel(tuple(float(v) for v in ms))
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise ReplayError(f"cannot read cost table {path}: {exc}") from None


def record(
    model: Model,
    prompts: Iterable[tuple[str, str | None, Sequence[int]]],
    *,
    max_tokens: int,
    cost_ms: Sequence[float],
    threads: int,
) -> Recording:
    """Decode each ``(id, language, prompt tokens)`` greedily on ``model`` and record it."""
    engine = Engine(model)  # no planner: one row per pass, the greedy baseline
    recorded = []
    for pid, language, tokens in prompts:
        chosen: list[int] = []
        margins: list[float] = []
        verify = model.verify

        def logged(
            rows_in: Sequence[int],
            verify: Callable[[Sequence[int]], Rows] = verify,
            chosen: list[int] = chosen,
            margins: list[float] = margins,
        ) -> Rows:
            rows = verify(rows_in)
            chosen.append(rows.argmax[0])
            margins.append(float(rows.margin[0]))  # valid only until the next decode
            return rows

        model.verify = logged  # type: ignore[method-assign,assignment]
        try:
            model.truncate(0)
            gen = engine.stream(tokens, GenerationOptions(max_tokens=max_tokens, speculative=False))
            gen.run()
        finally:
            del model.verify
        recorded.append(
            RecordedPrompt(pid, language, tuple(gen.prompt), tuple(chosen), tuple(margins))
        )
    return Recording(model.name, threads, max_tokens, tuple(cost_ms), tuple(recorded))
