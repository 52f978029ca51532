"""The on-disk prompt-prefix cache (``model/prefix_cache.py``).

Exactness on the stand-in: a restored prefix gives the same tokens as an
evaluated one and spares its evaluation. The folder is hostile ground: damaged,
foreign, oversized and non-regular entries are ignored (and removed where they
are this model's), a write that fails leaves nothing behind, and the size cap
evicts the least recently used entries. On the real model, a restored state
continues exactly as the evaluated one it was saved from.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import numpy as np
import pytest

from structspec.files import cache_home, default_cache_home
from structspec.model import prefix_cache
from structspec.model.prefix_cache import (
    RESTORE_MIN,
    SAVE_GAP,
    PrefixCache,
)
from structspec.model.standin import StandInModel
from structspec.runtime import open_model

TEXT = "def add(a, b):\n    return a + b\n\n" * 40  # ~1,300 stand-in tokens


def standin(folder, seed=0, **kwargs):
    model = StandInModel(seed=seed)
    model.prefix_cache = PrefixCache(folder, model.identity(), **kwargs)
    return model


def evaluate(model, tokens):
    """Prefill ``tokens``, then the idle time after it: what is due is saved."""
    model.prefill(tokens)
    model.save_prefixes()


def greedy(model, prompt, n=24):
    """``n`` greedy tokens after ``prompt`` (one row per pass)."""
    model.prefill(prompt[:-1])
    out, pending = [], prompt[-1]
    for _ in range(n):
        pending = model.verify([pending]).argmax[0]
        out.append(pending)
    return out


def test_a_restored_prefix_gives_the_tokens_an_evaluated_one_gives(tmp_path):
    prompt = StandInModel().tokenize(TEXT)
    first = standin(tmp_path)
    evaluate(first, prompt)
    assert first.prefix_cache.saves == 1

    restarted = standin(tmp_path)  # a new process: nothing in memory
    assert greedy(restarted, prompt) == greedy(StandInModel(), prompt)
    assert restarted.prefix_cache.hits == 1
    assert restarted.prefilled_tokens == 0  # the whole prefix came from disk


def test_a_longer_entry_serves_a_prompt_that_shares_its_start(tmp_path):
    model = StandInModel()
    window = model.tokenize(TEXT)
    evaluate(standin(tmp_path), window)  # a pre-warmed window
    above = window[:600] + model.tokenize("x = 1\n", add_bos=False)  # a cursor above its end

    restarted = standin(tmp_path)
    restarted.prefill(above)
    assert restarted.cached_tokens == above
    assert restarted.prefilled_tokens == len(above) - 600
    assert greedy(restarted, above) == greedy(StandInModel(), above)


def windowed(folder, window=128):
    """A stand-in whose saved states hold their last ``window`` positions' window only."""
    model = StandInModel(sliding_window=window)
    model.prefix_cache = PrefixCache(folder, model.identity(), window=window)
    return model


def test_a_state_longer_than_the_window_is_evaluated_instead_of_read_back(tmp_path):
    """Such a state (saved by a version before the rule) lacks its window: never read back."""
    model = StandInModel()
    window = model.tokenize(TEXT)
    old = StandInModel(sliding_window=128)
    old.prefix_cache = PrefixCache(tmp_path, old.identity())  # no window: it saves anything
    evaluate(old, window)
    assert old.prefix_cache.saves == 1
    above = window[:600] + model.tokenize("x", add_bos=False)

    restarted = windowed(tmp_path)
    assert greedy(restarted, above) == greedy(StandInModel(), above)
    assert restarted.prefix_cache.hits == 0 and restarted.prefilled_tokens == len(above) - 1


def test_a_windowed_cache_saves_and_reads_back_the_states_within_the_window(tmp_path):
    model = StandInModel()
    window = model.tokenize(TEXT)
    first = windowed(tmp_path)
    evaluate(first, window[:100])
    evaluate(first, window)  # longer than the window: not saved
    assert first.prefix_cache.saves == 1
    after = window[:100] + model.tokenize("x = 1\n", add_bos=False)

    restarted = windowed(tmp_path)
    assert greedy(restarted, after) == greedy(StandInModel(), after)
    assert restarted.prefix_cache.hits == 1 and restarted.prefilled_tokens == len(after) - 101


def test_a_windowed_cache_serves_states_within_the_window_only():
    assert PrefixCache(Path("unused"), "m", window=64).serves(64)
    assert not PrefixCache(Path("unused"), "m", window=64).serves(65)
    assert PrefixCache(Path("unused"), "m").serves(10**6)  # no window: any state


def test_short_prompts_are_neither_saved_nor_restored(tmp_path):
    model = standin(tmp_path)
    evaluate(model, model.tokenize(TEXT)[: RESTORE_MIN - 1])
    assert model.prefix_cache.saves == 0
    assert not list(tmp_path.glob("*.kv"))


def test_a_short_new_document_is_saved_and_restored(tmp_path):
    """A prompt no entry serves is saved from RESTORE_MIN tokens on (a short file, reopened)."""
    prompt = StandInModel().tokenize(TEXT)[: RESTORE_MIN + 10]
    evaluate(standin(tmp_path), prompt)
    restarted = standin(tmp_path)
    assert greedy(restarted, prompt) == greedy(StandInModel(), prompt)
    assert restarted.prefix_cache.hits == 1 and restarted.prefilled_tokens == 0


def test_a_save_comes_only_after_a_long_new_stretch(tmp_path):
    model = standin(tmp_path)
    prompt = model.tokenize(TEXT)
    evaluate(model, prompt[:400])
    evaluate(model, prompt[: 400 + SAVE_GAP - 1])  # little beyond what is saved
    assert model.prefix_cache.saves == 1
    evaluate(model, prompt[: 400 + SAVE_GAP])
    assert model.prefix_cache.saves == 2


def test_a_damaged_entry_is_evaluated_instead_and_removed(tmp_path):
    prompt = StandInModel().tokenize(TEXT)
    evaluate(standin(tmp_path), prompt)
    (entry,) = tmp_path.glob("*.kv")
    data = bytearray(entry.read_bytes())
    data[-3] ^= 0xFF  # one flipped byte of the payload
    entry.write_bytes(bytes(data))

    restarted = standin(tmp_path)
    assert greedy(restarted, prompt) == greedy(StandInModel(), prompt)
    assert restarted.prefilled_tokens == len(prompt) - 1
    assert restarted.prefix_cache.hits == 0
    restarted.save_prefixes()  # removed, then saved again from the evaluation
    assert restarted.prefix_cache.saves == 1
    assert len(list(tmp_path.glob("*.kv"))) == 1


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:20],  # truncated in the header
        lambda b: b"NOTACACHE" + b[9:],  # another file under an entry's name
        lambda b: b[:-10],  # truncated payload
        lambda b: b[:8] + (10**6).to_bytes(4, "little") + b[12:],  # a huge header length
    ],
)
def test_damaged_files_never_break_a_prefill(tmp_path, damage):
    prompt = StandInModel().tokenize(TEXT)
    evaluate(standin(tmp_path), prompt)
    (entry,) = tmp_path.glob("*.kv")
    entry.write_bytes(damage(entry.read_bytes()))
    restarted = standin(tmp_path)
    evaluate(restarted, prompt)
    assert restarted.cached_tokens == prompt
    assert restarted.prefix_cache.hits == 0


def test_another_models_entries_are_not_used_and_kept(tmp_path):
    prompt = StandInModel().tokenize(TEXT)
    evaluate(standin(tmp_path, seed=1), prompt)  # another model, same tokens
    model = standin(tmp_path, seed=0)
    evaluate(model, prompt)
    assert model.prefix_cache.hits == 0
    assert model.prefilled_tokens == len(prompt)
    assert len(list(tmp_path.glob("*.kv"))) == 2  # each model's own entry


def test_an_entry_the_model_refuses_is_removed(tmp_path):
    prompt = StandInModel().tokenize(TEXT)
    first = standin(tmp_path)
    evaluate(first, prompt)
    (entry,) = tmp_path.glob("*.kv")
    # A valid entry whose state does not belong to its tokens (the model's own
    # check refuses it): evaluated instead, and the entry goes.
    cache = PrefixCache(tmp_path, first.identity())
    entry.unlink()
    cache.save(prompt, b"\x00" * 16)
    restarted = standin(tmp_path)
    evaluate(restarted, prompt)
    assert restarted.cached_tokens == prompt
    assert restarted.prefilled_tokens == len(prompt)
    assert restarted.prefix_cache.saves == 1  # the evaluated state replaced it


def test_a_failed_write_leaves_nothing_and_the_prefill_goes_on(tmp_path, monkeypatch):
    def disk_full(*_args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(prefix_cache.os, "replace", disk_full)
    model = standin(tmp_path)
    prompt = model.tokenize(TEXT)
    evaluate(model, prompt)
    assert model.cached_tokens == prompt
    assert model.prefix_cache.saves == 0
    assert list(tmp_path.iterdir()) == []  # no temporary file left


def test_an_unusable_folder_is_skipped(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    model = standin(blocker / "prefix")
    prompt = model.tokenize(TEXT)
    evaluate(model, prompt)
    assert model.cached_tokens == prompt
    assert model.prefix_cache.saves == 0


def test_fifos_and_links_in_the_folder_are_ignored(tmp_path):
    os.mkfifo(tmp_path / "a.kv")  # reading it would block forever
    (tmp_path / "b.kv").symlink_to("/dev/zero")  # reading it would never end
    model = standin(tmp_path)
    prompt = model.tokenize(TEXT)
    evaluate(model, prompt)
    assert model.cached_tokens == prompt
    assert model.prefix_cache.saves == 1


def test_the_size_cap_evicts_the_least_recently_used(tmp_path):
    model = StandInModel()
    prompts = [model.tokenize(f"# file {i}\n" + TEXT) for i in range(3)]
    entry_bytes = len(TEXT) * 8 + 200  # tokens and payload of one entry, about
    cache = PrefixCache(tmp_path, model.identity(), max_bytes=int(entry_bytes * 2.5))
    model.prefix_cache = cache
    evaluate(model, prompts[0])
    time.sleep(0.01)
    evaluate(model, prompts[1])
    time.sleep(0.01)
    evaluate(model, prompts[2])
    assert len(list(tmp_path.glob("*.kv"))) == 2
    fresh = standin(tmp_path, max_bytes=int(entry_bytes * 2.5))
    fresh.prefill(prompts[0])  # the oldest went
    assert fresh.prefix_cache.hits == 0


def test_the_temporary_files_of_killed_saves_are_removed(tmp_path):
    """A save killed before its rename leaves a file no entry counts: removed once old
    (a young one may be another process's save in progress)."""
    old, young = tmp_path / ".tmp-killed.kv", tmp_path / ".tmp-writing.kv"
    old.write_bytes(b"\0" * 1000)
    young.write_bytes(b"\0" * 1000)
    os.utime(old, (1e9, 1e9))
    model = standin(tmp_path)
    evaluate(model, model.tokenize(TEXT))
    assert model.prefix_cache.saves == 1
    assert not old.exists() and young.exists()


def test_the_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("STRUCTSPEC_CACHE_DIR", str(tmp_path))
    assert cache_home() == tmp_path
    assert PrefixCache.in_cache_home("m").folder == tmp_path / "prefix"
    monkeypatch.setenv("STRUCTSPEC_CACHE_DIR", "")
    assert cache_home() is None
    assert PrefixCache.in_cache_home("m") is None
    monkeypatch.delenv("STRUCTSPEC_CACHE_DIR")
    assert cache_home() == default_cache_home()


def test_the_language_servers_model_has_the_cache_and_the_others_do_not(tmp_path, monkeypatch):
    monkeypatch.setenv("STRUCTSPEC_CACHE_DIR", str(tmp_path))
    assert open_model("standin", prefix_cache=True).prefix_cache.folder == tmp_path / "prefix"
    assert open_model("standin").prefix_cache is None


@pytest.mark.model
def test_a_restored_state_continues_as_the_evaluated_one(tmp_path):
    from structspec.model.llama import LlamaModel
    from structspec.model.paths import default_model_path

    path = default_model_path()
    text = Path(prefix_cache.__file__).read_text(encoding="utf-8")
    first = LlamaModel.load(path, n_ctx=2048, threads=2)
    tokens = first.tokenize(text)[: first.sliding_window]  # what the cache keeps of a prompt
    prompt, follow = tokens[:-4], tokens[-4:]
    first.prefix_cache = PrefixCache(tmp_path, first.identity(), window=first.sliding_window)
    with first.threads_pinned(2):
        evaluate(first, prompt)
        assert first.prefix_cache.saves == 1
        expected = np.array(first.verify(follow).logits[:])
    first.close()

    restarted = LlamaModel.load(path, n_ctx=2048, threads=2)
    restarted.prefix_cache = PrefixCache(
        tmp_path, restarted.identity(), window=restarted.sliding_window
    )
    with restarted.threads_pinned(2):
        assert restarted.prefill(prompt) == len(prompt)  # all of it restored
        got = np.array(restarted.verify(follow).logits[:])
    assert restarted.prefix_cache.hits == 1
    # The same KV state and the same pass: the same logits, up to the order of
    # float additions.
    scale = max(1.0, float(np.abs(expected).max()))
    assert np.abs(got - expected).max() <= 1e-3 * scale
    restarted.close()


@pytest.mark.model
def test_a_chunked_prefill_after_a_restart_reads_the_whole_prompt_back(tmp_path):
    """The first chunk's read back holds the saved prompt: no chunk after it is evaluated."""
    from structspec.completion.prewarm import PREFILL_CHUNK, PromptRate, prefill_in_chunks
    from structspec.model.llama import LlamaModel
    from structspec.model.paths import default_model_path

    path = default_model_path()
    text = Path(prefix_cache.__file__).read_text(encoding="utf-8")
    first = LlamaModel.load(path, n_ctx=2048, threads=2, slots=3)
    window = first.sliding_window  # what the cache keeps of a prompt
    prompt = first.tokenize(text)[:window]
    assert len(prompt) > 3 * PREFILL_CHUNK
    first.prefix_cache = PrefixCache(tmp_path, first.identity(), window=window)
    evaluate(first, prompt)
    assert first.prefix_cache.saves == 1
    first.close()

    restarted = LlamaModel.load(path, n_ctx=2048, threads=2, slots=3)
    restarted.prefix_cache = PrefixCache(tmp_path, restarted.identity(), window=window)
    rate = PromptRate()
    assert prefill_in_chunks(restarted, prompt, lambda: False, rate=rate)
    assert restarted.prefix_cache.hits == 1
    assert restarted.reusable_prefix(prompt) == len(prompt)
    assert not rate.measured  # every chunk was read back: none evaluated
    restarted.close()


def load_default(folder):
    from structspec.model.llama import LlamaModel
    from structspec.model.paths import default_model_path

    model = LlamaModel.load(default_model_path(), n_ctx=2048, threads=2)
    model.prefix_cache = PrefixCache(folder, model.identity(), window=model.sliding_window)
    return model


def next_logits(model, prompt):
    """The logits after ``prompt``: its last token verified after the rest (two threads)."""
    with model.threads_pinned(2):
        model.prefill(prompt[:-1])
        return np.array(model.verify(prompt[-1:]).logits[:])


def assert_same_logits(got, expected):
    """The same KV state and pass: the same logits, up to the order of float additions."""
    scale = max(1.0, float(np.abs(expected).max()))
    assert np.abs(got - expected).max() <= 1e-3 * scale


@pytest.mark.model
def test_a_state_longer_than_the_window_is_not_read_back_on_the_default_model(tmp_path):
    """The default model's state of 1,536 tokens holds the window of its last 512 only.

    Read back and cut back to a cursor far above its end, it wrote a run of
    spaces; the prompt there is evaluated instead.
    """
    text = Path(prefix_cache.__file__).read_text(encoding="utf-8")
    first = load_default(tmp_path)
    assert 0 < first.sliding_window < 1000
    first.prefix_cache = PrefixCache(tmp_path, first.identity())  # as before the rule
    tokens = first.tokenize(text)[: 3 * first.sliding_window]
    evaluate(first, tokens)
    assert first.prefix_cache.saves == 1
    first.close()
    above = tokens[:300]
    fresh = load_default(tmp_path / "none")
    expected = next_logits(fresh, above)
    fresh.close()

    restarted = load_default(tmp_path)
    assert_same_logits(next_logits(restarted, above), expected)
    assert restarted.prefix_cache.hits == 0
    restarted.close()


@pytest.mark.model
def test_a_longer_state_is_saved_at_closing_cut_to_the_window(tmp_path):
    """Read back, a state of the window's length continues as an evaluated one, rolled back too."""
    text = Path(prefix_cache.__file__).read_text(encoding="utf-8")
    first = load_default(tmp_path)
    window = first.sliding_window
    tokens = first.tokenize(text)[: 2 * window]
    with first.threads_pinned(2):
        first.prefill(tokens[:-8])
        first.verify(tokens[-8:-4])  # a suggestion written after the prompt
    assert first.save_prefixes() == 0  # idle time: a state past the window is not saved
    assert first.save_prefixes(closing=True) == 1
    assert first.cached_tokens == tokens[:window]
    first.close()

    def steps(model):
        """Past the window, then rolled back and continued elsewhere."""
        with model.threads_pinned(2):
            model.prefill(tokens[:window])
        ahead = next_logits(model, tokens)
        model.truncate(window + 40)
        return ahead, next_logits(model, tokens[: window + 100])

    fresh = load_default(tmp_path / "none")
    expected = steps(fresh)
    fresh.close()
    restarted = load_default(tmp_path)
    for got, want in zip(steps(restarted), expected, strict=True):
        assert_same_logits(got, want)
    assert restarted.prefix_cache.hits == 1
    restarted.close()


def test_entries_another_process_saves_or_evicts_are_seen(tmp_path):
    """Two servers on one folder (two editor windows): each sees the other's saves and evictions."""
    prompt = StandInModel().tokenize(TEXT)
    reader = standin(tmp_path)
    assert reader.prefix_cache.best(prompt) == (None, 0)  # its index is read: nothing saved
    evaluate(standin(tmp_path), prompt)  # the other process saves

    before = reader.prefilled_tokens
    reader.prefill(prompt)
    assert reader.prefix_cache.hits == 1 and reader.prefilled_tokens == before

    for entry in tmp_path.glob("*.kv"):  # the other process evicts
        entry.unlink()
    fresh = standin(tmp_path)
    evaluate(fresh, prompt)  # ... and saves again: a new entry, the same name
    reader.truncate(0)
    reader.prefill(prompt)
    assert reader.prefix_cache.hits == 2 and reader.prefilled_tokens == before


def test_a_folder_that_did_not_change_is_not_read_again(tmp_path, monkeypatch):
    model = StandInModel()
    evaluate(standin(tmp_path), model.tokenize(TEXT))
    evaluate(standin(tmp_path, seed=1), model.tokenize(TEXT))  # another model's entry
    cache = PrefixCache(tmp_path, model.identity())
    reads: list[str] = []
    real = PrefixCache._read_tokens

    def counted(self, path):
        if self is cache:
            reads.append(path.name)
        return real(self, path)

    monkeypatch.setattr(PrefixCache, "_read_tokens", counted)
    for _ in range(3):
        assert cache.best(model.tokenize(TEXT))[1] == len(model.tokenize(TEXT))
    assert len(reads) == 2  # each file's header once, this model's and the other's
    evaluate(standin(tmp_path), model.tokenize("x = 1\n" + TEXT))  # a new entry
    cache.best(model.tokenize(TEXT))
    assert len(reads) == 3  # only the new one's
