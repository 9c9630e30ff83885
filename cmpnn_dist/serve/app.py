"""The Ray Serve application: HTTP routes over :class:`~cmpnn_dist.serve.engine.Engine`.

Routes (JSON unless said otherwise):

* ``GET /`` the page (``page.html``: static HTML + JS, no external resources);
* ``GET /health`` status and counters (``forwards``: model forward passes of this replica,
  ``predict_requests``, ``predict_batches``, ``largest_batch``);
* ``GET /entities?prefix=P&limit=20`` entity names starting with P (completion);
* ``GET /relations`` relation names and the tail types of each;
* ``POST /predict`` ``{"head", "relation", "k"?, "tail_type"?}`` -> ranked tails;
* ``POST /explain`` ``{"head", "relation", "tail", "k"?}`` -> paths with edge weights.

With ``serve.batching=true`` concurrent ``/predict`` requests reaching one replica are
gathered by ``serve.batch`` (up to ``max_batch_size``, waiting at most ``batch_wait_ms``) and
answered by one forward pass.  ``/explain`` (a forward and a backward pass each) is answered
by a deployment of its own, :class:`Explainer` (``explain_replicas`` model copies, one
explanation at a time each): the replicas that answer ``/predict`` only pass the body on, so
explanations cannot hold up predictions; past ``max_explain_queue`` explanations waiting, a
request is refused with a 503.  Errors are ``{"error": "<one line>"}`` with a 4xx status: 400
a malformed body (:mod:`.body`), 404 an unknown route, 405 a wrong method, 413 a body over
``max_body_bytes``, 422 an unknown name (with the closest names); 503 a full explanation queue;
anything else (a bug) a 500 with the same one-line JSON.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ray import serve
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from cmpnn_dist.serve.body import parse_body
from cmpnn_dist.serve.engine import Engine, RequestError
from cmpnn_dist.serve.settings import ServeSettings

PAGE = Path(__file__).with_name("page.html")


def _error(exc: RequestError) -> JSONResponse:
    return JSONResponse({"error": exc.message}, status_code=exc.status)


async def _read_json(request: Request, limit: int) -> Any:
    """The request's JSON body; 413 past ``limit`` bytes (declared or streamed)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestError(413, f"request body of {declared} bytes exceeds {limit} bytes")
    data = bytearray()
    async for chunk in request.stream():
        data.extend(chunk)
        if len(data) > limit:
            raise RequestError(413, f"request body exceeds {limit} bytes")
    return parse_body(bytes(data))


def _engine(settings: ServeSettings, max_batch_size: int) -> Engine:
    """The replica's model (the launcher's checkpoint, one torch thread per CPU).  Called from
    each deployment's constructor, before Serve starts the replica's gRPC server."""
    import torch

    from cmpnn_dist.distributed.local_ray import serve_replica_on_node_address
    from cmpnn_dist.predict import Predictor

    serve_replica_on_node_address()  # that server on the node address, not every interface
    if settings.cwd:
        os.chdir(settings.cwd)  # the checkpoint and data paths are the launcher's
    torch.set_num_threads(max(1, int(settings.cpus_per_replica)))
    predictor = Predictor.from_checkpoint(
        settings.ckpt,
        settings.overrides,
        weights=settings.weights,
        graph=settings.graph,
        device=settings.device,
    )
    return Engine(predictor, max_batch_size, settings.max_k)


@serve.deployment
class Explainer:
    """A replica answering ``/explain`` bodies, one at a time: a model copy of its own."""

    def __init__(self, settings: ServeSettings) -> None:
        self.engine = _engine(settings, 1)

    def explain(self, body: Any) -> dict[str, Any]:
        """``{"answer": ...}``, or ``{"status", "error"}`` for a request it refuses."""
        try:
            return {"answer": self.engine.explain(body)}
        except RequestError as exc:
            return {"status": exc.status, "error": exc.message}


@serve.deployment
class PredictServer:
    """One replica: a model copy and its :class:`Engine`; ``/explain`` goes to ``explainer``
    (a handle of :class:`Explainer`)."""

    def __init__(self, settings: ServeSettings, explainer: Any) -> None:
        self.settings = settings
        self.engine = _engine(settings, settings.max_batch_size)
        self.explainer = explainer
        self.page = PAGE.read_text(encoding="utf-8")
        self._batched.set_max_batch_size(settings.max_batch_size)
        self._batched.set_batch_wait_timeout_s(settings.batch_wait_ms / 1000.0)

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.005)
    async def _batched(self, queries: list[Any]) -> list[dict[str, Any]]:
        return self.engine.predict_many(queries)

    async def _predict(self, request: Request) -> Response:
        query = self.engine.parse_predict(await _read_json(request, self.settings.max_body_bytes))
        if self.settings.batching:
            answer = await self._batched(query)
        else:
            answer = self.engine.predict_many([query])[0]
        return JSONResponse(answer)

    async def _explain(self, request: Request) -> Response:
        from ray.serve.exceptions import BackPressureError

        body = await _read_json(request, self.settings.max_body_bytes)
        try:
            out = await self.explainer.explain.remote(body)
        except BackPressureError:
            raise RequestError(
                503,
                f"busy: {self.settings.max_explain_queue} explanations are waiting; try again "
                "later",
            ) from None
        if "error" in out:
            raise RequestError(out["status"], out["error"])
        return JSONResponse(out["answer"])

    def _entities(self, request: Request) -> Response:
        prefix = request.query_params.get("prefix", "")
        limit_text = request.query_params.get("limit", "20")
        if not limit_text.isdigit() or not 1 <= int(limit_text) <= 1000:
            raise RequestError(400, f"limit={limit_text!r}: expected an integer in [1, 1000]")
        return JSONResponse({"entities": self.engine.entities(prefix, int(limit_text))})

    async def __call__(self, request: Request) -> Response:
        routes = {
            ("GET", "/"): lambda r: HTMLResponse(self.page),
            ("GET", "/health"): lambda r: JSONResponse(self._health()),
            ("GET", "/entities"): self._entities,
            ("GET", "/relations"): lambda r: JSONResponse(self.engine.relations()),
            ("POST", "/predict"): self._predict,
            ("POST", "/explain"): self._explain,
        }
        path = request.url.path.rstrip("/") or "/"
        handler = routes.get((request.method, path))
        try:
            if handler is None:
                if any(p == path for _, p in routes):
                    raise RequestError(405, f"{request.method} {path}: method not allowed")
                raise RequestError(404, f"no route {request.method} {path}")
            result = handler(request)
            if hasattr(result, "__await__"):
                result = await result
            return result
        except RequestError as exc:
            return _error(exc)
        except Exception as exc:  # noqa: BLE001 - a bug: still one JSON line, not a page
            line = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            return JSONResponse({"error": f"internal error ({line})"}, status_code=500)

    def _health(self) -> dict[str, Any]:
        s = self.settings
        return {
            **self.engine.health(),
            "batching": s.batching,
            "max_batch_size": s.max_batch_size,
            "batch_wait_ms": s.batch_wait_ms,
        }


def build_app(settings: ServeSettings) -> Any:
    """The Serve application for ``settings`` (replicas, CPUs and queue lengths applied)."""
    cpus = {"num_cpus": settings.cpus_per_replica}
    explainer = Explainer.options(
        num_replicas=settings.explain_replicas,
        max_ongoing_requests=1,
        max_queued_requests=settings.max_explain_queue,
        ray_actor_options=cpus,
    ).bind(settings)
    return PredictServer.options(
        num_replicas=settings.replicas,
        max_ongoing_requests=settings.max_ongoing_requests,
        ray_actor_options=cpus,
    ).bind(settings, explainer)
