"""Chat prompts: the model's own (GGUF) template when it has one, else the plain transcript."""

from __future__ import annotations

import openai
import pytest
from tests.helpers.http_server import ServerThread, standin_engine

from structspec.engine.decode import GenerationOptions
from structspec.http.app import create_app
from structspec.http.chat import PLAIN_STOP, TemplateError, chat_prompt, render_plain
from structspec.model.standin import StandInModel

TEMPLATE = (
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}{{ raise_exception('tool messages are not supported') }}{% endif %}"
    "{{ m.role }}: {{ m.content }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


class TemplatedModel(StandInModel):
    """The stand-in with a chat template, as a GGUF with ``tokenizer.chat_template`` has."""

    def chat_template(self) -> str:
        return TEMPLATE


def test_plain_transcript() -> None:
    p = render_plain(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "more"},
        ]
    )
    assert p.text == "Be brief.\n\nUser: hi\nAssistant: hello\nUser: more\nAssistant:"
    assert p.stop == (PLAIN_STOP,)


def test_template_rendering_and_errors() -> None:
    model = TemplatedModel()
    p = chat_prompt(TEMPLATE, [{"role": "user", "content": "x = 1"}], model)
    assert p.text == "user: x = 1\nassistant:" and p.stop == ()
    with pytest.raises(TemplateError, match="tool messages"):
        chat_prompt(TEMPLATE, [{"role": "tool", "content": "x"}], model)
    with pytest.raises(TemplateError, match="chat template failed"):
        chat_prompt("{% for %}", [{"role": "user", "content": "x"}], model)
    with pytest.raises(TemplateError):  # the sandbox refuses attribute games
        chat_prompt(
            "{{ messages.__class__.__mro__[1].__subclasses__() }}",
            [{"role": "user", "content": "x"}],
            model,
        )


def test_templates_render_as_hugging_face_renders_them() -> None:
    """Loop controls and ``tojson(ensure_ascii=False)``, which real models' templates use,
    failed every chat request ("unknown tag", a TypeError)."""
    template = (
        "{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
        "{{ m | tojson(ensure_ascii=False) }}{% if loop.index > 2 %}{% break %}{% endif %}"
        "{% endfor %}"
    )
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "é <b>"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "never"},
    ]
    text = chat_prompt(template, messages, TemplatedModel()).text
    assert text == '{"role": "user", "content": "é <b>"}{"role": "assistant", "content": "a"}'


def test_server_uses_the_model_template() -> None:
    model = TemplatedModel(seed=3, eos_bias=-3.0)
    app = create_app(standin_engine(model), model_id="templated")
    with ServerThread(app) as server:
        c = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
        card = c.models.list().data[0]
        assert card.model_dump()["chat_template"] == "gguf"
        r = c.chat.completions.create(
            model="templated", messages=[{"role": "user", "content": "def f(x):"}], max_tokens=20
        )
        ref_engine = standin_engine(TemplatedModel(seed=3, eos_bias=-3.0))
        tokens = ref_engine.model.tokenize("user: def f(x):\nassistant:")
        expected = ref_engine.generate(tokens, GenerationOptions(max_tokens=20)).text
        assert r.choices[0].message.content == expected
        with pytest.raises(openai.BadRequestError, match="tool messages are not supported"):
            c.chat.completions.create(
                model="templated", messages=[{"role": "tool", "content": "x"}], max_tokens=5
            )
