"""Serving a trained model over HTTP with Ray Serve, and a page to explore its answers.

``python -m cmpnn_dist.serve ckpt=PATH`` (see ``__main__``).  :mod:`.engine` answers the
requests with the predict API (no Ray); :mod:`.body` turns a request body into JSON or a 400;
:mod:`.app` is the Ray Serve application and its routes; :mod:`.launch` starts and stops Ray
and Serve; :mod:`.signals` makes Ctrl-C / SIGTERM stop it at any moment; ``page.html`` is the
page at ``/``.
Needs the ``serve`` extra (``pip install -e ".[serve]"``: Ray Serve, FastAPI, uvicorn).
"""
