"""What draft inputs cost a request (``python -m structspec.bench.draft_inputs``): stand-in."""

from __future__ import annotations

from structspec.bench import draft_inputs
from structspec.model.standin import StandInModel


def test_the_table_has_each_unit_cost_and_each_way(capsys):
    assert draft_inputs.main(["--model", "standin", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    for key in (
        "tokenize ms / 1,000 characters",
        "lookup index µs / token",
        "motif scan µs / token",
    ):
        assert float(rows[key].split("|")[2]) > 0
    for way in draft_inputs.WAYS:
        assert float(rows[f"a request's draft inputs, {way} (ms)"].split("|")[2]) > 0


def test_a_budgeted_request_tokenizes_its_window_and_at_most_the_budget():
    class Counting(StandInModel):
        chars = 0

        def tokenize(self, text: str, add_bos: bool = True) -> list[int]:
            self.chars += len(text)
            return super().tokenize(text, add_bos=add_bos)

    texts = draft_inputs.module_texts()
    counted = {}
    for way in ("everything at once", "budgeted"):
        model = Counting()
        draft_inputs.request_ms(model, texts, way)
        counted[way] = model.chars
    window = draft_inputs.WINDOW_CHARS
    assert counted["everything at once"] > sum(map(len, texts)) // 2
    assert window < counted["budgeted"] <= window + draft_inputs.REQUEST_CHARS
