#!/usr/bin/env python3
"""Checks moe-serve with real clients (the openai package, httpx, curl) on
loopback, a free port each time.

  serve_check.py SCENARIO --plan PLAN --tokenizer DIR [--greedy JSON]
                 [-- MOE-SERVE ARGS...]

Starts `moe-serve PLAN --tokenizer DIR --port 0 ARGS` (from PATH), waits for
/health, runs SCENARIO, then sends SIGTERM and expects exit status 0.
Scenarios: api (ids and text prompts, chat, streaming, stop strings and
ids, usage, bad requests, /metrics), concurrent (16 greedy clients at once
each get their solo ids), key (--api-key), cancel (a client that goes away
mid-stream), cancel_frees_slot (and its slot serves the next request at
once), queue (429 from a full queue), drain (SIGTERM with requests in
flight), load (64 clients at once; nothing lost, memory bounded). Prints
"ok ..." per check and exits 1 at the first failure. Generous timeouts, no
speed assertions: a loaded 2-core machine passes.
"""

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families
from tokenizers import Tokenizer

TIMEOUT = 300


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)
    print(f"ok {what}", flush=True)


class Server:
    def __init__(self, plan, tokenizer, extra, ranks=0):
        exe = shutil.which("moe-serve")
        if exe is None:
            raise Failure("moe-serve is not on PATH")
        launcher = []
        if ranks:
            # Open MPI refuses root without both variables; --oversubscribe
            # lets the ranks share this machine's cores.
            os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
            os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            launcher = ["mpirun", "-np", str(ranks), "--oversubscribe",
                        "--bind-to", "none"]
        self.proc = subprocess.Popen(
            launcher + [exe, plan, "--tokenizer", tokenizer, "--port", "0"] +
            extra,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines = []
        self._listening = threading.Event()
        self.url = None
        threading.Thread(target=self._read, daemon=True).start()
        if not self._listening.wait(TIMEOUT) or self.url is None:
            self.proc.kill()
            raise Failure("moe-serve did not start:\n" + self.log())
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                r = httpx.get(self.url + "/health", timeout=10)
                if r.status_code == 200:
                    break
                if r.status_code != 503:
                    raise Failure(f"/health said {r.status_code}")
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise Failure("moe-serve never became healthy:\n" +
                              self.log())
            time.sleep(0.1)
        # moe-serve's model id: the plan's file name without its extension.
        self.model = os.path.splitext(os.path.basename(plan))[0]

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            if "listening on http://" in line and self.url is None:
                self.url = "http://" + line.split("http://")[1].split()[0]
                self._listening.set()
        self._listening.set()

    def log(self):
        return "\n".join(self.lines)

    def client(self, key="none", **kw):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key,
                             max_retries=0, timeout=TIMEOUT, **kw)

    def metrics(self):
        text = httpx.get(self.url + "/metrics", timeout=TIMEOUT).text
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                key = s.name + "".join(f"{{{k}={v}}}" for k, v in
                                       sorted(s.labels.items()))
                out[key] = s.value
        return out

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise Failure("no VmRSS")

    def stop(self):
        # Under mpirun, rank 0 (whose pid the log gives) drains; mpirun's
        # own SIGTERM would kill the job.
        ranks = re.findall(r"SIGTERM to pid (\d+)", self.log())
        if ranks:
            os.kill(int(ranks[0]), signal.SIGTERM)
        else:
            self.proc.send_signal(signal.SIGTERM)
        try:
            status = self.proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise Failure("moe-serve did not exit after SIGTERM:\n" +
                          self.log())
        check(status == 0, f"SIGTERM: moe-serve exited with status {status}")


def complete(client, model, prompt, **kw):
    extra = kw.pop("extra_body", {})
    return client.completions.create(
        model=model, prompt=prompt,
        extra_body={"return_token_ids": True, **extra}, **kw)


def ids_of(choice):
    return choice.model_extra["token_ids"]


# -- scenarios ---------------------------------------------------------------


def scenario_api(server, args, tok, cases):
    r = httpx.get(server.url + "/health", timeout=TIMEOUT)
    check(r.json() == {"status": "ok"}, "/health: 200 {'status': 'ok'}")
    client = server.client()
    models = client.models.list().data
    model = models[0].id
    check([m.id for m in models] == [os.path.splitext(os.path.basename(
        args.plan))[0]], f"/v1/models: {model}")
    used = {"prompt": 0, "completion": 0, "requests": 0}

    def count(usage):
        used["prompt"] += usage.prompt_tokens
        used["completion"] += usage.completion_tokens
        used["requests"] += 1

    for case in cases:
        c = complete(client, model, case["prompt"],
                     max_tokens=len(case["new_ids"]), temperature=0)
        count(c.usage)
        check(ids_of(c.choices[0]) == case["new_ids"] and
              c.choices[0].finish_reason == "length" and
              c.usage.prompt_tokens == len(case["prompt"]) and
              c.usage.completion_tokens == len(case["new_ids"]) and
              c.usage.total_tokens == len(case["prompt"]) +
              len(case["new_ids"]),
              f"ids prompt of {len(case['prompt'])}: transformers' "
              f"{len(case['new_ids'])} greedy ids, usage")

    # Text in and out: a text prompt is its ids, the text the ids' words.
    text = "the city of light and the river"
    prompt_ids = tok.encode(text).ids
    t = complete(client, model, text, max_tokens=20, temperature=0)
    count(t.usage)
    i = complete(client, model, prompt_ids, max_tokens=20, temperature=0)
    count(i.usage)
    new = ids_of(t.choices[0])
    check(ids_of(i.choices[0]) == new and t.choices[0].text ==
          i.choices[0].text and t.usage.prompt_tokens == len(prompt_ids),
          f"text prompt = its {len(prompt_ids)} ids")
    want = tok.decode(prompt_ids + new)[len(tok.decode(prompt_ids)):]
    check(t.choices[0].text == want and len(want.split()) > 5,
          f"text round trip: {text!r} -> {t.choices[0].text!r}")
    full = t.choices[0].text

    # Streaming: the same text in several chunks, then usage and [DONE].
    chunks, usage, reasons = [], None, []
    for chunk in client.completions.create(
            model=model, prompt=text, max_tokens=20, temperature=0,
            stream=True, stream_options={"include_usage": True}):
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            chunks.append(c.text)
            reasons.append(c.finish_reason)
    count(usage)
    # (How many chunks depends on timing: ids that come together go out
    # together.)
    check("".join(chunks) == full and reasons[-1] == "length" and
          usage.completion_tokens == 20,
          "streamed completion: the same text in chunks, usage")
    raw = subprocess.run(
        ["curl", "-sN", "--max-time", str(TIMEOUT), server.url +
         "/v1/completions", "-H", "Content-Type: application/json", "-d",
         json.dumps({"prompt": text, "max_tokens": 6, "temperature": 0,
                     "stream": True})],
        capture_output=True, text=True, check=True).stdout
    events = [e for e in raw.split("\n\n") if e.strip()]
    check(all(e.startswith("data: ") for e in events) and
          events[-1] == "data: [DONE]" and
          json.loads(events[-2][6:])["usage"]["completion_tokens"] == 6,
          f"curl -N: {len(events)} SSE events ending with data: [DONE]")
    used["prompt"] += len(prompt_ids)
    used["completion"] += 6
    used["requests"] += 1

    # Stop strings, across token boundaries, streamed or not.
    words = full.split()
    stop = " ".join(words[3:5])
    cut = full.index(stop)
    for stream in (False, True):
        if stream:
            got = "".join(c.choices[0].text for c in client.completions.create(
                model=model, prompt=text, max_tokens=20, temperature=0,
                stop=[stop], stream=True) if c.choices)
            reason = "stop"
        else:
            c = client.completions.create(model=model, prompt=text,
                                          max_tokens=20, temperature=0,
                                          stop=["not in the text", stop])
            got, reason = c.choices[0].text, c.choices[0].finish_reason
            count(c.usage)
            k = next(k for k in range(len(new) + 1) if stop in tok.decode(
                prompt_ids + new[:k])[len(tok.decode(prompt_ids)):])
            check(c.usage.completion_tokens == k,
                  f"usage counts the {k} ids up to the stop string's end")
        check(got == full[:cut] and reason == "stop",
              f"stop string {stop!r} ({'streamed' if stream else 'whole'}): "
              f"{got!r}")
    used["requests"] += 1  # the streamed one; its usage is not read
    used["prompt"] += len(prompt_ids)

    # Stop ids: generation ends on the id, whose word is left out.
    stop_id = new[5]
    c = complete(client, model, prompt_ids, max_tokens=20, temperature=0,
                 extra_body={"stop_token_ids": [stop_id]})
    count(c.usage)
    k = new.index(stop_id)
    check(ids_of(c.choices[0]) == new[:k + 1] and
          c.choices[0].finish_reason == "stop" and
          c.choices[0].text == tok.decode(prompt_ids + new[:k])[
              len(tok.decode(prompt_ids)):],
          f"stop id {stop_id}: {k + 1} ids, its word left out")

    # Chat: the messages through the template, then as a completion.
    messages = [{"role": "system", "content": "the sun"},
                {"role": "user", "content": "where is the river"}]
    rendered = ("<|system|> the sun <|end|> <|user|> where is the river "
                "<|end|> <|assistant|>")
    chat = client.chat.completions.create(
        model=model, messages=messages, max_tokens=10, temperature=0,
        extra_body={"return_token_ids": True})
    count(chat.usage)
    ids = tok.encode(rendered, add_special_tokens=False).ids
    c = complete(client, model, ids, max_tokens=10, temperature=0)
    count(c.usage)
    check(ids_of(chat.choices[0]) == ids_of(c.choices[0]) and
          chat.choices[0].message.content == c.choices[0].text and
          chat.choices[0].message.role == "assistant" and
          chat.usage.prompt_tokens == len(ids),
          f"chat template: {len(ids)} prompt ids, "
          f"{chat.choices[0].message.content!r}")
    parts = []
    for chunk in client.chat.completions.create(
            model=model, messages=messages, max_tokens=10, temperature=0,
            stream=True):
        for ch in chunk.choices:
            parts.append(ch.delta.content or "")
    used["requests"] += 1
    used["prompt"] += len(ids)
    check("".join(parts) == chat.choices[0].message.content,
          "streamed chat: the same text")

    # Bad requests: a 4xx with an OpenAI error, and the server serves on.
    def bad(body, status, what, path="/v1/completions", raw=None):
        r = httpx.post(server.url + path, timeout=TIMEOUT,
                       content=raw if raw is not None else json.dumps(body),
                       headers={"Content-Type": "application/json"})
        err = r.json().get("error", {})
        check(r.status_code == status and isinstance(err.get("message"), str)
              and err.get("type"), f"{what}: {status} {err.get('message')!r}")

    bad(None, 400, "malformed JSON", raw=b'{"prompt": "the", ')
    bad({"prompt": prompt_ids, "max_tokens": 48}, 400,
        "prompt plus max_tokens beyond max-seq")
    bad({"prompt": "the", "temperature": -0.5}, 400, "negative temperature")
    bad(None, 400, "temperature NaN",
        raw=b'{"prompt": "the", "temperature": NaN}')
    bad({"prompt": "the", "model": "no-such-model"}, 404, "unknown model")
    bad({"prompt": [3, 500]}, 400, "an id outside the vocabulary")
    bad({"max_tokens": 3}, 400, "no prompt")
    bad({"messages": [{"role": "tool", "content": "x"}]}, 400,
        "a role the chat template refuses", "/v1/chat/completions")
    try:
        client.completions.create(model=model, prompt="the", temperature=-1)
        raise Failure("no error for a negative temperature")
    except openai.BadRequestError as e:
        check(e.status_code == 400, "openai client: BadRequestError")
    c = complete(client, model, cases[0]["prompt"],
                 max_tokens=len(cases[0]["new_ids"]), temperature=0)
    count(c.usage)
    check(ids_of(c.choices[0]) == cases[0]["new_ids"],
          "after the bad requests the server still serves")
    # Seeded sampling draws the same ids for the same seed, whatever its
    # size, and top_k beyond the vocabulary keeps all ids.
    drawn = [ids_of(complete(client, model, [3, 14, 15], max_tokens=12,
                             temperature=1.0, top_p=0.9, seed=seed,
                             extra_body={"top_k": k}).choices[0])
             for seed, k in ((11, 0), (11, 0), (11, 1000), (2**70 + 11, 0))]
    used["requests"] += 4
    used["prompt"] += 12
    check(drawn[0] == drawn[1] == drawn[2] == drawn[3] and
          len(drawn[0]) == 12, f"seeded sampling: {drawn[0]}")

    m = server.metrics()
    a = args.serve_args
    slots = int(a[a.index("--slots") + 1]) if "--slots" in a else 1
    check(m["moe_serve_prompt_tokens_total"] == used["prompt"] and
          m["moe_serve_generation_tokens_total"] >= used["completion"],
          f"/metrics: {used['prompt']} prompt tokens, at least "
          f"{used['completion']} generated")
    ended = sum(v for k, v in m.items()
                if k.startswith("moe_serve_requests_total{"))
    check(ended == used["requests"] and
          m["moe_serve_time_to_first_token_seconds_count"] == ended and
          m["moe_serve_time_per_output_token_seconds_count"] > 0 and
          m["moe_serve_requests_running"] == 0 and
          m["moe_serve_requests_waiting"] == 0 and
          m["moe_serve_kv_slots_in_use"] == 0 and
          m["moe_serve_kv_slots"] == slots,
          f"/metrics: {ended:.0f} requests, TTFT and TPOT histograms, "
          "running, waiting, slots")


def scenario_concurrent(server, args, tok, cases):
    model = server.model
    jobs = [case for case in cases for _ in range(4)]

    def one(case):
        c = complete(server.client(), model, case["prompt"],
                     max_tokens=len(case["new_ids"]), temperature=0)
        return ids_of(c.choices[0]) == case["new_ids"]

    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        same = list(pool.map(one, jobs))
    check(all(same) and len(same) == 16,
          f"{len(same)} concurrent greedy clients: each its solo ids")
    # How the engine ran them, as its log says ("serving NAME: HOW").
    for line in server.log().splitlines():
        if line.startswith("moe-serve: serving "):
            print("engine: " + line.split(": ", 2)[-1], flush=True)


def scenario_key(server, args, tok, cases):
    key = args.serve_args[args.serve_args.index("--api-key") + 1]
    r = httpx.post(server.url + "/v1/completions", timeout=TIMEOUT,
                   json={"prompt": "the", "max_tokens": 2})
    check(r.status_code == 401 and "error" in r.json(),
          "no key: 401 with an error")
    try:
        server.client("wrong").models.list()
        raise Failure("a wrong key was let in")
    except openai.AuthenticationError as e:
        check(e.status_code == 401, "wrong key: 401 (openai client)")
    c = complete(server.client(key), server.model, cases[0]["prompt"],
                 max_tokens=len(cases[0]["new_ids"]), temperature=0)
    check(ids_of(c.choices[0]) == cases[0]["new_ids"], "right key: served")
    check(httpx.get(server.url + "/health").status_code == 200,
          "/health needs no key")


def _wait_metric(server, key, want, what):
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        m = server.metrics()
        if m.get(key, 0) == want:
            return m
        time.sleep(0.05)
    raise Failure(f"{what}: {key} never reached {want}")


def scenario_cancel(server, args, tok, cases):
    client = server.client()
    long = args.long_tokens
    stream = client.completions.create(model=server.model, prompt=[3, 14, 15],
                                       max_tokens=long, temperature=0,
                                       stream=True)
    first = next(iter(stream))
    stream.close()
    check(first.choices[0].text is not None, "a stream began; the client "
          "went away after its first chunk")
    m = _wait_metric(server, 'moe_serve_requests_total{finish_reason=cancelled}',
                     1, "cancellation")
    check(m["moe_serve_generation_tokens_total"] < long,
          f"the server cancelled the sequence after "
          f"{m['moe_serve_generation_tokens_total']:.0f} of {long} ids")
    c = complete(client, server.model, cases[0]["prompt"],
                 max_tokens=len(cases[0]["new_ids"]), temperature=0)
    check(ids_of(c.choices[0]) == cases[0]["new_ids"],
          "the server serves on after the disconnect")


def scenario_cancel_frees_slot(server, args, tok, cases):
    """With one slot (--slots 1): a long request run to the end, then the
    same request cancelled after its first chunk, and a short one sent at
    once, which gets its ids on the one slot. The engine's token counter
    (not a clock: a loaded machine passes) shows that the cancelled
    sequence stopped short of max_tokens and gave up its slot instead of
    running on unsent."""
    client = server.client()
    long = args.long_tokens
    start = time.monotonic()
    c = complete(client, server.model, [3, 14, 15], max_tokens=long,
                 temperature=0)
    full = time.monotonic() - start
    check(c.usage.completion_tokens == long,
          f"a request of {long} ids ran to the end alone")
    before = server.metrics()["moe_serve_generation_tokens_total"]
    stream = client.completions.create(model=server.model, prompt=[3, 14, 15],
                                       max_tokens=long, temperature=0,
                                       stream=True)
    first = next(iter(stream))
    stream.close()
    gone = time.monotonic()
    check(first.choices[0].text is not None, "the same request began; the "
          "client went away after its first chunk")
    short = len(cases[0]["new_ids"])
    c = complete(client, server.model, cases[0]["prompt"], max_tokens=short,
                 temperature=0)
    took = time.monotonic() - gone
    check(ids_of(c.choices[0]) == cases[0]["new_ids"],
          "the next request on the one slot got its greedy ids")
    m = _wait_metric(server, 'moe_serve_requests_total{finish_reason=cancelled}',
                     1, "cancellation")
    cancelled = m["moe_serve_generation_tokens_total"] - before - short
    print(f"cancel-frees-slot: {long} ids took {full:.2f} s; the next request "
          f"finished {took:.2f} s after the disconnect", flush=True)
    check(cancelled < long, f"the cancelled request stopped after "
          f"{cancelled:.0f} of {long} ids and freed its slot")


def scenario_queue(server, args, tok, cases):
    long = args.long_tokens

    def one(_):
        try:
            c = server.client().completions.create(
                model=server.model, prompt=[3, 14, 15], max_tokens=long,
                temperature=0)
            return c.usage.completion_tokens
        except openai.RateLimitError as e:
            body = e.response.json()
            return ("429", body["error"]["type"])

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        got = list(pool.map(one, range(8)))
    full = [g for g in got if g == long]
    refused = [g for g in got if isinstance(g, tuple)]
    check(len(full) + len(refused) == 8 and len(full) >= 2 and refused and
          all(r == ("429", "rate_limit_exceeded") for r in refused),
          f"8 requests at once, 1 slot, --max-queue 1: {len(full)} served, "
          f"{len(refused)} got 429")
    m = server.metrics()
    check(m['moe_serve_requests_rejected_total{status=429}'] == len(refused),
          "/metrics counts the 429s")
    check(httpx.get(server.url + "/health").status_code == 200,
          "the server serves on")


def scenario_drain(server, args, tok, cases):
    long = args.long_tokens
    results = {}

    def stream(name):
        texts, usage, done = [], None, False
        with httpx.stream("POST", server.url + "/v1/completions",
                          timeout=TIMEOUT,
                          json={"prompt": [3, 14, 15], "max_tokens": long,
                                "temperature": 0, "stream": True}) as r:
            for line in r.iter_lines():
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: "):
                    event = json.loads(line[6:])
                    usage = event.get("usage") or usage
                    texts.append(event["choices"][0]["text"])
                    if name == "a" and len(texts) == 1:
                        started.set()
        results[name] = (r.status_code, usage, done)

    started = threading.Event()
    a = threading.Thread(target=stream, args=("a",))
    a.start()
    started.wait(TIMEOUT)
    b = threading.Thread(target=stream, args=("b",))
    b.start()
    # Both submitted (each counts its 3 prompt tokens then): b waits, or
    # runs if a has already ended; it lasts long past the signal either way.
    _wait_metric(server, "moe_serve_prompt_tokens_total", 6,
                 "the second request")
    server.proc.send_signal(signal.SIGTERM)
    a.join(TIMEOUT)
    b.join(TIMEOUT)
    for name in "ab":
        status, usage, done = results.get(name, (None, None, False))
        check(status == 200 and done and usage and
              usage["completion_tokens"] == long,
              f"SIGTERM: the {'first' if name == 'a' else 'second'} "
              f"request finished: {long} ids, data: [DONE]")
    status = server.proc.wait(TIMEOUT)
    check(status == 0 and "drained" in server.log(),
          f"moe-serve drained and exited with status {status}")


def scenario_load(server, args, tok, cases):
    model = server.model
    warm = complete(server.client(), model, [3], max_tokens=4, temperature=0)
    check(len(ids_of(warm.choices[0])) == 4, "warm-up request")
    rss0 = server.rss_kib()
    clients, each = 64, 3

    def one(k):
        client = server.client()
        done = []
        for j in range(each):
            n = 1 + (k * 7 + j * 3) % 20
            if (k + j) % 3 == 0:
                parts = [c.choices[0].delta.content or "" for c in
                         client.chat.completions.create(
                             model=model, max_tokens=n, temperature=0.7,
                             seed=k, stream=True, messages=[
                                 {"role": "user", "content": "the sun"}])
                         if c.choices]
                done.append(len(parts) >= 1)
            else:
                c = complete(client, model, [3 + k % 100, 14], max_tokens=n,
                             temperature=0, extra_body={"ignore_eos": True})
                done.append(len(ids_of(c.choices[0])) == n and
                            c.usage.completion_tokens == n)
        return done

    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        got = [x for d in pool.map(one, range(clients)) for x in d]
    seconds = time.monotonic() - start
    check(len(got) == clients * each and all(got),
          f"{clients} clients at once, {clients * each} requests: none lost")
    m = server.metrics()
    ended = sum(v for k, v in m.items()
                if k.startswith("moe_serve_requests_total{"))
    check(ended == clients * each + 1 and m["moe_serve_requests_running"] == 0
          and m["moe_serve_requests_waiting"] == 0,
          f"/metrics: {ended:.0f} requests ended, none running or waiting")
    check(httpx.get(server.url + "/health").json() == {"status": "ok"},
          "the server is alive")
    rss1 = server.rss_kib()
    check(rss1 - rss0 < 256 * 1024,
          f"RSS bounded: {rss0 // 1024} MiB before, {rss1 // 1024} MiB after")
    print(f"load: {clients * each} requests in {seconds:.1f} s", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("scenario")
    p.add_argument("--plan", required=True)
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--greedy",
                   help="examples/zoo/v5/mixtral_generation_greedy.json")
    p.add_argument("--mpi", type=int, default=0, metavar="N",
                   help="start moe-serve under mpirun -np N")
    p.add_argument("--long-tokens", type=int, default=4000,
                   help="new ids of the long requests (cancel, "
                   "cancel_frees_slot, queue, drain)")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:cut])
    args.serve_args = argv[cut + 1:]
    tok = Tokenizer.from_file(os.path.join(args.tokenizer, "tokenizer.json"))
    cases = json.load(open(args.greedy))["cases"] if args.greedy else []
    run = globals()["scenario_" + args.scenario]
    server = Server(args.plan, args.tokenizer, args.serve_args, args.mpi)
    try:
        run(server, args, tok, cases)
        if args.scenario != "drain":
            server.stop()
    except (Failure, AssertionError, openai.OpenAIError, httpx.HTTPError,
            KeyError) as e:
        print(f"FAIL {type(e).__name__}: {e}\n--- moe-serve log:\n" +
              server.log(), flush=True)
        if server.proc.poll() is None:
            server.proc.kill()
        return 1
    print(f"serve {args.scenario}: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
