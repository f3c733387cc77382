"""moe-serve: an OpenAI-compatible server over a generation plan, and
`moe-serve generate`, text in and out on the command line (docs/serving.md).

    moe-serve PLAN --tokenizer PATH [--host 127.0.0.1] [--port 8080]
              [--slots N] [--api-key KEY] [--devices N] [--max-queue M]
              [--batch-invariant]
    mpirun -np N moe-serve PLAN --tokenizer PATH ...   # rank 0 serves HTTP
    moe-serve generate PLAN --tokenizer PATH --prompt TEXT [--chat] ...
"""

import argparse
import importlib
import os
import sys

# The serving requirements (tools/moe-serve/requirements.txt); a missing one
# is named with where it comes from.
_NEEDED = {"tokenizers": "tokenizers", "jinja2": "jinja2"}
_NEEDED_SERVE = {"fastapi": "fastapi", "uvicorn": "uvicorn",
                 "prometheus_client": "prometheus-client"}


def _require(modules, prog):
    for module, package in modules.items():
        try:
            importlib.import_module(module)
        except ImportError:
            sys.exit(f"{prog}: error: the Python package '{package}' is "
                     f"missing: scripts/setup.sh installs moe-serve's "
                     f"requirements (tools/moe-serve/requirements.txt) into "
                     f".venv, or pip install -r "
                     f"tools/moe-serve/requirements.txt")
    try:
        importlib.import_module("moert")
    except ImportError as e:
        sys.exit(f"{prog}: error: cannot import the moert module ({e}); it "
                 "is built into build/python where pybind11 and the Python "
                 "headers are found")


def _sampling_args(p):
    p.add_argument("--threads", type=int, default=0,
                   help="kernel threads per sequence (0: the hardware "
                        "concurrency divided by the slots)")


def _serve_parser():
    p = argparse.ArgumentParser(
        prog="moe-serve",
        description="Serves a generation plan over an OpenAI-compatible "
                    "HTTP API (docs/serving.md). `moe-serve generate "
                    "--help`: text generation on the command line.")
    p.add_argument("plan", help="a generation plan (moec compile DECODE.onnx "
                                "--prefill PREFILL.onnx --max-seq S)")
    p.add_argument("--tokenizer", required=True,
                   help="tokenizer.json, or a folder with tokenizer.json "
                        "and tokenizer_config.json")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080,
                   help="0: a free port, said in the log")
    p.add_argument("--slots", type=int, default=1,
                   help="sequences that run at once, each with its KV cache")
    p.add_argument("--max-queue", type=int, default=256,
                   help="requests that may wait for a slot; more get 429")
    p.add_argument("--api-key", default=None,
                   help="require 'Authorization: Bearer KEY' on /v1/")
    p.add_argument("--devices", type=int, default=None,
                   help="devices of an expert-parallel plan (all run in "
                        "this process); must be the plan's")
    p.add_argument("--model-name", default=None,
                   help="the model id of /v1/models (default: the plan's "
                        "file name without its extension)")
    p.add_argument("--access-log", action="store_true",
                   help="log every request")
    p.add_argument("--max-image-bytes", type=int, default=16 << 20,
                   help="the largest image (decoded from its data URI) a "
                        "chat message may hold (default 16 MiB)")
    p.add_argument("--batch-invariant", action="store_true",
                   help="kernels whose sums do not depend on the other "
                        "sequences of a step, so that a sequence's logits "
                        "are the same batched or alone, bit for bit "
                        "(MOERT_BATCH_INVARIANT=1; slower)")
    _sampling_args(p)
    return p


def _generate_parser():
    p = argparse.ArgumentParser(
        prog="moe-serve generate",
        description="Generates text from a text prompt with a generation "
                    "plan, streaming it to stdout (moe-run PLAN --tokenizer "
                    "PATH --prompt TEXT runs this).")
    p.add_argument("plan")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--prompt", required=True)
    p.add_argument("--chat", action="store_true",
                   help="the prompt is a user message, through the chat "
                        "template")
    p.add_argument("--system", default=None,
                   help="with --chat: a system message before it")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="default: what fits in the plan's max_seq")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stop", action="append", default=[],
                   help="a stop string (repeatable)")
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--devices", type=int, default=None,
                   help="devices of an expert-parallel plan (all run in "
                        "this process); must be the plan's")
    _sampling_args(p)
    return p


def _check_devices(args, plan):
    if args.devices is not None and args.devices != plan.num_devices:
        raise ValueError(f"--devices {args.devices}, but {args.plan} is "
                         f"compiled for {plan.num_devices} device(s)")


def generate(argv):
    args = _generate_parser().parse_args(argv)
    prog = "moe-serve generate"
    _require(_NEEDED, prog)
    import moert

    from .text import ChatTemplateError, TextModel, TextStream
    try:
        text = TextModel(args.tokenizer)
        plan = moert.Plan(args.plan)
        _check_devices(args, plan)
        gen = moert.Generator(plan, threads=args.threads)
    except (OSError, ValueError, moert.Error) as e:
        sys.exit(f"{prog}: error: {e}")
    if args.chat:
        messages = ([{"role": "system", "content": args.system}]
                    if args.system else [])
        messages.append({"role": "user", "content": args.prompt})
        try:
            prompt = text.encode(text.render_chat(messages), special=False)
        except ChatTemplateError as e:
            sys.exit(f"{prog}: error: {e}")
    else:
        prompt = text.encode(args.prompt)
    room = gen.max_seq - len(prompt)
    new = room if args.max_new_tokens is None else args.max_new_tokens
    stop_ids = [] if args.ignore_eos else text.eos_ids
    stream = TextStream(text, prompt, args.stop, stop_ids)

    class Stop(Exception):
        pass

    drawn = []

    def on_token(token):
        drawn.append(token)
        piece = stream.add(token)
        if piece:
            sys.stdout.write(piece)
            sys.stdout.flush()
        if stream.stopped:
            raise Stop()

    try:
        gen.generate(prompt, max_new_tokens=new, temperature=args.temperature,
                     top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                     stop_ids=stop_ids, on_token=on_token)
    except Stop:
        pass
    except ValueError as e:
        sys.exit(f"{prog}: error: {e}")
    sys.stdout.write(stream.finish() + "\n")
    sys.stdout.flush()
    print(f"{prog}: prompt of {len(prompt)} tokens, {len(drawn)} new; time "
          f"to first token {gen.times['first_token_seconds'] * 1e3:.3f} ms",
          file=sys.stderr)
    return 0


def serve(argv):
    args = _serve_parser().parse_args(argv)
    prog = "moe-serve"
    _require({**_NEEDED, **_NEEDED_SERVE}, prog)
    import logging
    import socket
    import threading

    if args.batch_invariant:
        # Read by the runtime when its first product runs.
        os.environ["MOERT_BATCH_INVARIANT"] = "1"
    import moert
    import uvicorn

    from .engine import BatchedSlots, GeneratorSlots
    from .server import Server, create_app
    from .text import TextModel

    logging.basicConfig(level=logging.INFO, format="%(message)s",
                        stream=sys.stderr)
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    if world > 1 and args.devices is not None:
        sys.exit(f"{prog}: error: --devices runs the devices in one process; "
                 f"under mpirun each of the {world} ranks runs one")
    if world > 1 and args.slots != 1:
        sys.exit(f"{prog}: error: --slots is {args.slots}; under mpirun "
                 "every generation spans all the ranks, so it must be 1")
    for name, value, least in (("--slots", args.slots, 1),
                               ("--max-image-bytes", args.max_image_bytes,
                                1),
                               ("--max-queue", args.max_queue, 0),
                               ("--threads", args.threads, 0)):
        if value < least:
            sys.exit(f"{prog}: error: {name} is {value}; it must be at "
                     f"least {least}")
    try:
        text = TextModel(args.tokenizer)
    except (OSError, ValueError) as e:
        sys.exit(f"{prog}: error: {e}")
    if not os.path.isfile(args.plan):
        sys.exit(f"{prog}: error: {args.plan}: no such file")
    name = args.model_name or os.path.splitext(os.path.basename(args.plan))[0]

    def load_mpi_plan():
        plan = moert.Plan(args.plan)
        if plan.num_devices != world:
            raise ValueError(f"{args.plan} is compiled for "
                             f"{plan.num_devices} device(s), but mpirun "
                             f"started {world} ranks")
        return plan

    if rank > 0:
        # Rank 0 serves HTTP; this rank runs its device of each generation.
        # SIGTERM reaches every rank: rank 0 drains, then says to exit.
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        from .engine import follow
        try:
            follow(load_mpi_plan(), args.threads)
        except (OSError, ValueError, moert.Error) as e:
            sys.exit(f"{prog}: error: rank {rank}: {e}")
        return 0

    def load():
        engine = dict(slots=args.slots, max_queue=args.max_queue,
                      threads=args.threads)
        if world > 1:
            return GeneratorSlots(load_mpi_plan(), **engine, mpi=True)
        plan = moert.Plan(args.plan)
        _check_devices(args, plan)
        if not hasattr(moert, "BatchGenerator"):
            return GeneratorSlots(plan, **engine, why="this moert module "
                                  "has no BatchGenerator")
        if plan.num_devices > 1:
            return GeneratorSlots(plan, **engine, why="moert.BatchGenerator "
                                  "runs plans of one device")
        if plan.multimodal is not None:
            return GeneratorSlots(plan, **engine, why="a multimodal plan's "
                                  "prompts run its vision and language "
                                  "stages, which moert.BatchGenerator does "
                                  "not batch")
        return BatchedSlots(plan, **engine)

    server = Server(name, text, args.api_key, load,
                    max_image_bytes=args.max_image_bytes)
    app = create_app(server)
    try:
        sock = socket.create_server((args.host, args.port))
    except OSError as e:
        sys.exit(f"{prog}: error: cannot listen on {args.host}:{args.port}: "
                 f"{e}")
    host, port = sock.getsockname()[:2]
    logging.getLogger("moe-serve").info(
        "moe-serve: listening on http://%s:%d (model %s, tokenizer %s)",
        host, port, name, text.path)
    if world > 1:
        # mpirun answers its own SIGTERM by killing the job, so a drain
        # starts at rank 0.
        logging.getLogger("moe-serve").info(
            "moe-serve: rank 0 of %d (pid %d) serves; SIGTERM to pid %d "
            "drains it and stops every rank", world, os.getpid(),
            os.getpid())
    config = uvicorn.Config(app, log_level="info",
                            access_log=args.access_log,
                            timeout_keep_alive=5)
    uv = _quiet_exit_server(uvicorn)(config)

    def watch_load():
        server.loaded.wait()
        if server.load_error:
            uv.should_exit = True
    threading.Thread(target=watch_load, daemon=True).start()
    uv.run(sockets=[sock])
    if server.load_error:
        return 1
    logging.getLogger("moe-serve").info("moe-serve: stopped")
    return 0


def _quiet_exit_server(uvicorn):
    """uvicorn.Server that, once SIGTERM or SIGINT has drained it, returns
    (moe-serve then exits 0) instead of raising the signal again."""
    import contextlib
    import signal
    import threading

    class QuietExit(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            signals = (signal.SIGINT, signal.SIGTERM)
            original = {s: signal.signal(s, self.handle_exit)
                        for s in signals}
            try:
                yield
            finally:
                for s, handler in original.items():
                    signal.signal(s, handler)
    return QuietExit


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "generate":
        return generate(argv[1:])
    return serve(argv)


if __name__ == "__main__":
    sys.exit(main())
