"""The HTTP server (``python -m cmpnn_dist.serve``) and its page, against the Python API.

One module-scoped fixture trains a small model (``python -m cmpnn_dist.train
train.max_steps=20``) on the built-in rule KG written out as TSV files, with one entity
renamed to a piece of HTML (``SCRIPT_NAME``), and starts the real server (Ray Serve) on a
free local port as a separate process; the module's last test stops it with SIGTERM.  The
reference for every answer is the predict API (:class:`cmpnn_dist.predict.Predictor`) on the
same checkpoint.  The page is checked in Debian's headless Chromium through selenium and the
system's chromedriver; the screenshot goes to ``$CMPNN_SERVE_SCREENSHOT`` when set
(``docs/serve_page.png`` is made that way).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from cmpnn_dist.cli.common import run_cli
from cmpnn_dist.convert.synthetic.rule_kg import build_rule_kg
from cmpnn_dist.errors import UsageError
from cmpnn_dist.predict import Predictor
from cmpnn_dist.serve.launch import quiet_port
from tests.helpers.paths import REPO_ROOT as REPO
from tests.helpers.paths import running_in_ci
from tests.helpers.serve_proc import descendants as descendants_in
from tests.helpers.serve_proc import proc_table
from tests.helpers.sockets import Watch, descendants, listening

pytestmark = pytest.mark.integration  # a real server under Ray Serve

SCRIPT_NAME = "<script>pwned=1</script><img src=x onerror=pwned=2>"
RENAMED = "A::8"  # this type-A entity of the rule KG (a head of t0 facts) gets SCRIPT_NAME
START_TIMEOUT_S = 600  # Ray + Serve start in ~20 s on an idle 2-core machine, minutes loaded


def _need(module: str) -> None:
    try:
        __import__(module)
    except ImportError:
        if running_in_ci():
            pytest.fail(f"{module} is missing and CI=true: install the serve extra")
        pytest.skip(f"{module} is not installed (pip install -e '.[serve]')")


_need("starlette")


def _write_graph(folder: Path) -> None:
    """The default rule KG as TSV files (``train/valid/test.txt``) and a node-type file."""
    kw = build_rule_kg()
    g = kw["graphs"]["train"]
    names = [SCRIPT_NAME if n == RENAMED else n for n in g.entity_names]
    rels, types = kw["relation_names"], kw["node_type_names"]
    folder.mkdir(parents=True)
    for split, facts in g.facts.items():
        lines = (f"{names[h]}\t{rels[r]}\t{names[t]}\n" for h, r, t in np.asarray(facts).tolist())
        (folder / f"{split}.txt").write_text("".join(lines))
    typ = "".join(f"{n}\t{types[t]}\n" for n, t in zip(names, g.node_types.tolist(), strict=True))
    (folder / "types.tsv").write_text(typ)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path[1:]])}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("serve")
    _write_graph(root / "kg")
    args = [
        "data.name=serve_kg",
        "data.source=tsv:transductive",
        f"data.raw_path={root / 'kg'}",
        f"data.node_types={root / 'kg' / 'types.tsv'}",
        "train.max_steps=20",
        f"storage_root={root / 'storage'}",
        "run_name=serve",
        "train.progress=false",
    ]
    cmd = [sys.executable, "-m", "cmpnn_dist.train", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "storage" / "runs" / "serve"


@pytest.fixture(scope="module")
def predictor(run_dir) -> Predictor:
    return Predictor.from_checkpoint(run_dir, device="cpu")


class Server:
    def __init__(self, url: str, proc: subprocess.Popen, log: Path, port: int) -> None:
        self.url, self.proc, self.log, self.port = url, proc, log, port

    def request(self, method: str, path: str, body: object = None) -> tuple[int, dict]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())


@pytest.fixture(scope="module")
def server(run_dir, tmp_path_factory):
    port = quiet_port()
    log = tmp_path_factory.mktemp("serve_log") / "server.log"
    cmd = [
        sys.executable,
        "-m",
        "cmpnn_dist.serve",
        f"ckpt={run_dir}",
        f"serve.port={port}",
        "serve.batch_wait_ms=200",  # concurrent test requests surely meet in one batch
    ]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=_env())
    srv = Server(f"http://127.0.0.1:{port}", proc, log, port)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            pytest.fail(f"the server exited with {proc.returncode}: {log.read_text()[-3000:]}")
        try:
            if srv.request("GET", "/health")[1]["status"] == "ok":
                break
        except (OSError, ValueError, KeyError, http.client.HTTPException):
            pass  # not up yet; another process on the port: the server exits, saying so
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no /health after {START_TIMEOUT_S} s: {log.read_text()[-3000:]}")
        time.sleep(1.0)
    yield srv
    if proc.poll() is None:
        proc.kill()  # test_sigterm_stops_the_server did not run (a selection, a failure)
        proc.wait(60)


def _python_answers(predictor, head, relation, k):
    return predictor.predict(head=head, relation=relation, topk=k)


def _check_answers(got, frame):
    assert [a["tail"] for a in got["answers"]] == frame["tail"].tolist()
    assert [a["rank"] for a in got["answers"]] == frame["rank"].tolist()
    assert [a["known"] or "" for a in got["answers"]] == frame["known"].tolist()
    np.testing.assert_allclose(
        [a["score"] for a in got["answers"]], frame["score"], rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize(
    "head, relation, k", [("A::203", "t0", 10), ("A::17", "t1", 5), ("C::3", "t3", 20)]
)
def test_predict_matches_the_python_api(server, predictor, head, relation, k):
    status, got = server.request("POST", "/predict", {"head": head, "relation": relation, "k": k})
    assert status == 200, got
    assert (got["head"], got["relation"], got["k"]) == (head, relation, k)
    frame = _python_answers(predictor, head, relation, k)
    _check_answers(got, frame)
    assert any(a["known"] for a in got["answers"]) or not frame["known"].any()


def test_tail_type_restricts_the_candidates(server, predictor):
    body = {"head": "A::203", "relation": "t0", "k": 10, "tail_type": "C"}
    status, got = server.request("POST", "/predict", body)
    assert status == 200, got
    _check_answers(got, _python_answers(predictor, "A::203", "t0", 10))  # t0's tails are C
    status, got = server.request("POST", "/predict", {**body, "tail_type": "A"})
    assert status == 422 and "'A' is not a tail type of relation 't0'" in got["error"]
    status, got = server.request("POST", "/predict", {**body, "tail_type": "D"})
    assert status == 422 and got["error"].startswith("unknown node type 'D'")


def test_explain_matches_the_explain_api(server, predictor):
    frame = _python_answers(predictor, "A::203", "t0", 3)
    tail = frame["tail"].iloc[0]
    body = {"head": "A::203", "relation": "t0", "tail": tail, "k": 4}
    status, got = server.request("POST", "/explain", body)
    assert status == 200, got
    ref = predictor.explain("A::203", "t0", tail, k=4)
    assert [p["text"] for p in got["paths"]] == [ref.path_text(e) for _, e in ref.paths]
    assert len(got["paths"]) >= 1
    np.testing.assert_allclose([p["importance"] for p in got["paths"]], [i for i, _ in ref.paths])
    names = ref.entity_names
    for p, (_, edges) in zip(got["paths"], ref.paths, strict=True):
        assert [(e["from"], e["to"]) for e in p["edges"]] == [
            (names[s], names[d]) for s, _, d in edges
        ]
        # a path's importance is the mean of its edges' weights (explain.py)
        assert np.mean([e["weight"] for e in p["edges"]]) == pytest.approx(
            p["importance"], rel=1e-5
        )
        assert p["edges"][0]["from"] == "A::203" and p["edges"][-1]["to"] == tail


def test_concurrent_requests_share_forward_passes(server, predictor):
    heads = [f"A::{i}" for i in range(100, 116)]
    before = server.request("GET", "/health")[1]

    def ask(head):
        return server.request("POST", "/predict", {"head": head, "relation": "t0", "k": 5})

    with ThreadPoolExecutor(len(heads)) as pool:
        answers = list(pool.map(ask, heads))
    after = server.request("GET", "/health")[1]
    requests = after["predict_requests"] - before["predict_requests"]
    forwards = after["forwards"] - before["forwards"]
    assert requests == len(heads)
    assert 1 <= forwards < len(heads), (forwards, after)
    assert forwards == after["predict_batches"] - before["predict_batches"]
    for head, (status, got) in zip(heads, answers, strict=True):
        assert status == 200
        _check_answers(got, _python_answers(predictor, head, "t0", 5))


# (head, relation, k, tail_type): relations whose tails are of every type (t0: C, t1: B,
# t3: A, b0: B, b1: C, b2: A), the same pair twice with other k, tail types named or not
MIXED = [
    ("A::203", "t0", 5, None),
    ("A::17", "t1", 4, None),
    ("C::3", "t3", 6, None),
    ("A::203", "t1", 3, "B"),
    ("B::40", "b2", 5, "A"),
    ("A::17", "t0", 7, "C"),
    ("A::120", "b1", 5, None),
    ("C::3", "b0", 3, "B"),
    ("A::203", "t0", 2, "C"),
    ("B::40", "t3", 5, None),
    ("A::120", "t1", 6, None),
    ("A::17", "b2", 4, None),
]


@pytest.mark.integration
def test_a_batch_of_mixed_relations_and_tail_types_matches_the_python_api(server, predictor):
    """Concurrent requests for other relations and tail types share forward passes; each
    answer is still the predict API's, its tails of its own relation's tail type (a batch
    that applied one request's candidate mask to the others fails here)."""
    types = {
        r["name"]: r["tail_types"] for r in server.request("GET", "/relations")[1]["relations"]
    }
    assert len({types[rel][0] for _, rel, _, _ in MIXED}) == 3  # A, B and C tails
    before = server.request("GET", "/health")[1]

    def ask(query):
        head, relation, k, tail_type = query
        body = {"head": head, "relation": relation, "k": k}
        return server.request(
            "POST", "/predict", body | ({"tail_type": tail_type} if tail_type else {})
        )

    with ThreadPoolExecutor(len(MIXED)) as pool:
        answers = list(pool.map(ask, MIXED))
    after = server.request("GET", "/health")[1]
    requests = after["predict_requests"] - before["predict_requests"]
    assert requests == len(MIXED)
    assert after["forwards"] - before["forwards"] < len(MIXED)  # batched
    for (head, relation, k, _), (status, got) in zip(MIXED, answers, strict=True):
        assert status == 200, got
        assert {a["tail"].split("::")[0] for a in got["answers"]} == set(types[relation])
        _check_answers(got, _python_answers(predictor, head, relation, k))


def test_unknown_names_are_one_line_with_the_closest(server, predictor):
    for body, kind, name in (
        ({"head": "A::2033", "relation": "t0"}, "entity", "A::2033"),
        ({"head": "A::203", "relation": "to"}, "relation", "to"),
    ):
        status, got = server.request("POST", "/predict", body)
        assert status == 422
        with pytest.raises(UsageError) as ref:  # the predict API's own message
            getattr(predictor, "entities" if kind == "entity" else "relations").id(name)
        assert got["error"] == str(ref.value)
        assert "\n" not in got["error"] and "closest: " in got["error"]
    status, got = server.request(
        "POST", "/explain", {"head": "A::1", "relation": "t0", "tail": "Q"}
    )
    assert status == 422 and got["error"].startswith("unknown entity 'Q'")


def test_malformed_requests_are_400(server):
    for body, words in (
        ({"relation": "t0"}, "field 'head' is missing"),
        ({"head": "A::1", "relation": "t0", "k": 0}, "field 'k' must be in [1, 1000]"),
        ({"head": "A::1", "relation": "t0", "k": "5"}, "field 'k' must be an integer, got '5'"),
        ({"head": "A::1", "relation": "t0", "topk": 5}, "unknown field(s) topk"),
        ([1, 2], "must be a JSON object"),
    ):
        status, got = server.request("POST", "/predict", body)
        assert (status, words in got["error"]) == (400, True), got
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("POST", "/predict", body=b"{not json")
    r = conn.getresponse()
    assert r.status == 400 and "not JSON" in json.loads(r.read())["error"]
    assert server.request("GET", "/predict")[0] == 405
    assert server.request("GET", "/nowhere")[0] == 404


HOSTILE = [
    b"[" * 4000 + b"]" * 4000,  # 8 KB of nesting: a RecursionError in the parser once
    b'{"a":' * 2000 + b"1" + b"}" * 2000,
    b'{"head": "A::1", "relation": "t0", "k": ' + b"7" * 5000 + b"}",
    b'{"head": NaN, "relation": "t0"}',
    b'{"head": "\\ud800", "relation": "t0"}',
    b'{"head": "\xed\xa0\x80", "relation": "t0"}',
    b'{"head": "\xff", "relation": "t0"}',
    b'{"head": "A::1", "relation": "t0", "k": 1e999}',
    b'{"head": {"$ne": 1}, "relation": "t0"}',
    b'{"head": ["A::1"], "relation": "t0", "tail": "C::1"}',
    b'"A::1"',
    b"null",
    b"",
]


@pytest.mark.integration
@pytest.mark.parametrize("route", ["/predict", "/explain"])
def test_hostile_bodies_under_the_limit_are_one_json_4xx_line(server, route):
    for body in HOSTILE:
        assert len(body) < 16384
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
        conn.request("POST", route, body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        text = r.read().decode()
        assert r.status == 400, (body[:60], r.status, text)
        assert r.getheader("content-type") == "application/json", text
        error = json.loads(text)["error"]
        assert error and "\n" not in error, text


def test_oversized_bodies_are_413(server):
    big = {"head": "A::1" * 5000, "relation": "t0"}  # > 16384 bytes
    status, got = server.request("POST", "/predict", big)
    assert status == 413 and "exceeds 16384 bytes" in got["error"]
    # the same without a Content-Length (chunked): counted while it streams in
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    chunks = (json.dumps(big).encode()[i : i + 4096] for i in range(0, 20100, 4096))
    conn.request("POST", "/explain", body=chunks, encode_chunked=True)
    r = conn.getresponse()
    assert r.status == 413 and "exceeds 16384 bytes" in json.loads(r.read())["error"]


def _listening(port: int) -> list[str]:
    """Local addresses of the TCP sockets listening on ``port`` (from /proc/net/tcp*)."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, p = local.split(":")
            if state == "0A" and int(p, 16) == port:  # 0A: LISTEN
                if len(addr) == 8:
                    out.append(socket.inet_ntop(socket.AF_INET, bytes.fromhex(addr)[::-1]))
                else:
                    out.append(addr)
    return out


def test_listens_on_the_loopback_interface_only(server):
    assert _listening(server.port) == ["127.0.0.1"]
    # and so does every other socket of the server's process tree: its Ray (GCS, raylet,
    # agents), Serve's controller, proxy and replicas (tests/helpers/sockets.py reads /proc)
    tree = listening(sorted(descendants(server.proc.pid)))
    names = {x.name for x in tree}
    assert {"gcs_server", "raylet", "ray::ServeRepli", "ray::ProxyActor"} <= names, names
    assert Watch.exposed(tree) == []


def test_entity_completion_and_relations(server, predictor):
    names = predictor.entities.names
    status, got = server.request("GET", "/entities?prefix=C::1&limit=7")
    assert status == 200
    assert got["entities"] == sorted(n for n in names if n.startswith("C::1"))[:7]
    status, got = server.request("GET", "/entities?prefix=%3Cscript")
    assert got["entities"] == [SCRIPT_NAME]
    status, got = server.request("GET", "/relations")
    assert [r["name"] for r in got["relations"]] == predictor.relations.names
    assert {r["name"]: r["tail_types"] for r in got["relations"]}["t1"] == ["B"]


def test_the_page_loads_nothing_from_elsewhere(server):
    with urllib.request.urlopen(server.url + "/", timeout=60) as r:
        html = r.read().decode()
    urls = [w for w in html.replace('"', " ").split() if w.startswith(("http://", "https://"))]
    assert urls == ["http://www.w3.org/2000/svg"]  # the SVG namespace, not a download
    assert "innerHTML" not in html and "insertAdjacentHTML" not in html


def _browser():
    driver_path = shutil.which("chromedriver")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if driver_path is None or chromium is None:
        if running_in_ci():
            pytest.fail("chromium / chromedriver missing and CI=true (.ci/run installs them)")
        pytest.skip("no chromium / chromedriver (apt-get install chromium chromium-driver)")
    _need("selenium")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"):
        opts.add_argument(arg)
    opts.add_argument("--disable-dev-shm-usage")
    return webdriver.Chrome(service=Service(driver_path), options=opts)


def test_the_page_in_a_headless_browser(server, predictor, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver = _browser()
    try:
        wait = WebDriverWait(driver, 120)
        driver.get(server.url + "/")
        wait.until(lambda d: len(Select(d.find_element(By.ID, "relation")).options) > 0)

        def ask(head: str, relation: str) -> list:
            box = driver.find_element(By.ID, "head")
            box.clear()
            box.send_keys(head)
            Select(driver.find_element(By.ID, "relation")).select_by_visible_text(relation)
            k = driver.find_element(By.ID, "k")
            k.clear()
            k.send_keys("5")
            driver.find_element(By.ID, "go").click()
            wait.until(lambda d: f"({head}, {relation}, ?)" in d.find_element(
                By.ID, "results-caption").text)  # fmt: skip
            return driver.find_elements(By.CSS_SELECTOR, "#answers tr")

        # an ordinary head: the first answer and its drawn paths against the Python API
        rows = ask("A::203", "t0")
        frame = _python_answers(predictor, "A::203", "t0", 5)
        assert [r.find_element(By.CSS_SELECTOR, "td.tail").text for r in rows] == frame[
            "tail"
        ].tolist()
        known = [r.find_elements(By.CSS_SELECTOR, ".known") for r in rows]
        assert [k[0].text if k else "" for k in known] == [
            f"known: {x}" if x else "" for x in frame["known"]
        ]
        rows[0].click()
        wait.until(ec.visibility_of_element_located((By.ID, "paths-svg")))
        ref = predictor.explain("A::203", "t0", frame["tail"].iloc[0], k=5)
        groups = driver.find_elements(By.CSS_SELECTOR, "#paths-svg g.path")
        assert len(groups) == len(ref.paths) >= 1
        names = ref.entity_names
        for g, (_, edges) in zip(groups, ref.paths, strict=True):
            nodes = [t.text for t in g.find_elements(By.CSS_SELECTOR, "text.node")]
            assert nodes == [names[edges[0][0]], *[names[d] for _, _, d in edges]]
            rels = [t.text for t in g.find_elements(By.CSS_SELECTOR, "text.relation")]
            assert rels == [ref.relation_names[r % ref.num_relations] for _, r, _ in edges]
        shot = os.environ.get("CMPNN_SERVE_SCREENSHOT") or str(tmp_path / "serve_page.png")
        driver.save_screenshot(shot)
        assert Path(shot).stat().st_size > 10_000

        # a name that is HTML: shown as its characters, never run
        rows = ask(SCRIPT_NAME, "t0")
        caption = driver.find_element(By.ID, "results-caption").text
        assert caption.startswith(f"({SCRIPT_NAME}, t0, ?)")
        rows[0].click()
        wait.until(lambda d: SCRIPT_NAME in d.find_element(By.ID, "why-caption").text)
        wait.until(ec.visibility_of_element_located((By.ID, "paths-svg")))
        titles = driver.find_elements(By.CSS_SELECTOR, "#paths-svg g.entity > title")
        assert SCRIPT_NAME in [t.get_attribute("textContent") for t in titles]
        assert driver.execute_script("return typeof window.pwned") == "undefined"
        assert driver.find_elements(By.CSS_SELECTOR, "img") == []
    finally:
        driver.quit()


def test_a_field_of_the_wrong_type_names_its_json_kind():
    """The request checks without a server: an integer field given a string, a string
    field given a number; the line names what the field takes, as JSON says it."""
    from cmpnn_dist.serve.engine import RequestError, _fields

    for body, words in (
        ({"head": "A::1", "k": "5"}, "field 'k' must be an integer, got '5'"),
        ({"head": 7}, "field 'head' must be a string, got 7"),
        ({"head": "A::1", "k": True}, "field 'k' must be an integer, got True"),
    ):
        with pytest.raises(RequestError) as err:
            _fields(body, {"head": str}, {"k": int})
        assert (err.value.status, err.value.message) == (400, words)
    assert _fields({"head": "A::1", "k": 5}, {"head": str}, {"k": int}) == {"head": "A::1", "k": 5}


def test_bad_server_keys_are_one_line(capsys):
    from cmpnn_dist.cli.serve import _main

    for args, words in (
        (["serve.port=abc"], "ckpt= is missing"),
        (["ckpt=x", "serve.port=abc"], "serve.port='abc': expected an integer"),
        (["ckpt=x", "serve.prot=80"], "serve.prot is not a config key; did you mean serve.port?"),
        (["ckpt=x", "serve.batching=maybe"], "serve.batching='maybe': choose true or false"),
        (["ckpt=x", "serve.max_batch_size=100"], "serve.max_ongoing_requests=64 is below"),
    ):
        assert run_cli(_main, args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and words in err[0], err


def test_a_taken_port_is_one_line(run_dir, server, capsys):
    from cmpnn_dist.cli.serve import _main

    assert run_cli(_main, [f"ckpt={run_dir}", f"serve.port={server.port}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == f"error: serve.host=127.0.0.1 serve.port={server.port}: listening there is in use"


def test_a_port_taken_while_ray_starts_is_one_line_with_a_port_to_use(run_dir):
    """The port is free at the check before Ray starts; a listener takes it as soon as Ray is
    up (as one of Ray's own processes may, when the port is an ephemeral one): the start ends
    with one line that says so and names a port outside the ephemeral range."""
    import ray

    from cmpnn_dist.serve import launch
    from cmpnn_dist.serve.settings import settings_from

    low, high = launch.ephemeral_range()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert low <= port <= high
    settings = settings_from({"ckpt": str(run_dir), "serve.port": str(port)}, [], str(REPO))
    taker = socket.socket()
    done = threading.Event()

    def take_when_ray_is_up() -> None:
        while not ray.is_initialized() and not done.is_set():
            time.sleep(0.005)
        taker.bind(("127.0.0.1", port))
        taker.listen()

    thread = threading.Thread(target=take_when_ray_is_up, daemon=True)
    thread.start()
    try:
        with pytest.raises(UsageError) as caught:
            launch.start(settings)
    finally:
        done.set()
        thread.join(30)
        taker.close()
    message = str(caught.value)
    assert message.startswith(
        f"serve.host=127.0.0.1 serve.port={port}: free when the server began, taken while its "
        f"Ray started; ports {low}-{high} are the kernel's ephemeral range"
    ), message
    suggested = int(message.rsplit("serve.port=", 1)[1])
    assert not low <= suggested <= high
    assert not ray.is_initialized()  # the start stopped its Ray


def test_sigterm_stops_the_server(server):
    """Last in the module: SIGTERM ends the server with status 143, our two last lines, and
    none of the processes it started left (start-up moments:
    ``tests/integration/test_serve_faults.py``)."""
    started = descendants_in(server.proc.pid, proc_table())
    assert any("raylet" in r["cmd"] for r in started.values())
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(180) == 143, server.log.read_text()[-3000:]
    lines = server.log.read_text().splitlines()
    assert lines[-2] == "stopped by SIGTERM: Serve and its Ray are shut down"
    assert json.loads(lines[-1])["stopped_by"] == "SIGTERM"
    assert not any("graceful_shutdown" in x or "Token authentication" in x for x in lines)
    assert _listening(server.port) == []
    time.sleep(2.0)  # its watcher exits within a second of the last Ray process
    table = proc_table()
    left = [r["cmd"] for p, r in started.items() if table.get(p, {}).get("start") == r["start"]]
    assert left == []
