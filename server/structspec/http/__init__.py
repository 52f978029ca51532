"""The HTTP surface: an OpenAI-compatible server over the engine, or a metrics proxy.

``create_app(engine, model_id=...)`` serves the in-process speculative engine
(``app.py``); ``create_proxy_app(backend_url)`` relays to another
OpenAI-compatible server and adds metrics (``proxy.py``). ``structspec serve``
runs either under uvicorn with connection limits and timeouts (``serving.py``)
behind the Host / API-key / Content-Type checks of ``security.py``.
"""

from structspec.http.app import create_app
from structspec.http.proxy import create_proxy_app

__all__ = ["create_app", "create_proxy_app"]
