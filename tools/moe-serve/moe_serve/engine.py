"""The model side of moe-serve: sequences in, token ids out.

The HTTP server talks to an Engine only through `submit`, the callbacks it
passes there, `Sequence.cancel` and `counts`: `BatchedSlots` serves with the
runtime's continuous batching (moert.BatchGenerator), `GeneratorSlots` with
one moert.Generator per slot (expert-parallel plans; under mpirun, on rank
0, with `follow` on the other ranks):

    engine = BatchedSlots(moert.Plan("gen.plan"), slots=4, max_queue=64)
    seq = engine.submit(GenerationRequest(prompt=[3, 14, 15],
                                          max_new_tokens=8),
                        on_token=print, on_finish=print)
    seq.cancel()             # from any thread; on_finish then says so

`on_token(id)` and `on_finish(reason, error)` run on the engine's threads and
must return quickly without raising; `reason` is "stop" (a stop id was
drawn), "length" (max_new_tokens), "cancelled" or "error" (with a message).
"""

import collections
import dataclasses
import json
import os
import threading
import time
from typing import Callable, Optional


@dataclasses.dataclass
class GenerationRequest:
    prompt: list
    max_new_tokens: int
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    stop_ids: tuple = ()
    #: A multimodal plan's vision inputs {name: numpy array}, for a prompt
    #: with image tokens (GeneratorSlots only).
    vision: Optional[dict] = None


class QueueFull(Exception):
    """submit() found every slot busy and max_queue sequences waiting."""


class EngineClosed(Exception):
    """submit() after shutdown() began."""


class Sequence:
    """A submitted request, as the engine tracks it."""

    def __init__(self, request: GenerationRequest,
                 on_token: Callable[[int], None],
                 on_finish: Callable[[str, Optional[str]], None]):
        self.request = request
        self.on_token = on_token
        self.on_finish = on_finish
        self._cancelled = threading.Event()
        self.submitted = time.monotonic()
        self.started: Optional[float] = None
        self.first_token: Optional[float] = None
        self.finished: Optional[float] = None
        self.new_tokens = 0
        self.finish_reason: Optional[str] = None
        #: Whether the runtime refused the request's prompt or images
        #: (ValueError) before it drew an id: the client's error.
        self.refused = False

    def cancel(self):
        """Asks the engine to stop this sequence; safe from any thread and
        after the sequence ended."""
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()


class Engine:
    """What the server needs of an engine (see the module's docstring)."""

    #: Positions a sequence may use: prompt plus new tokens.
    max_seq: int
    vocab_size: int
    #: Sequences that can run at once (KV cache slots).
    slots: int
    #: One line for the log: how sequences are served, and why.
    mode: str
    #: A multimodal plan's moert.Plan.multimodal; None for text-only plans.
    multimodal: Optional[dict] = None

    def submit(self, request: GenerationRequest, on_token, on_finish
               ) -> Sequence:
        raise NotImplementedError

    def counts(self) -> dict:
        """{'running': n, 'waiting': n, 'slots_in_use': n}."""
        raise NotImplementedError

    def load_images(self, images: list, canvases: bool = False):
        """The vision inputs of encoded PNG or JPEG images by the plan's
        image processor (moert.load_images); ValueError names a bad one.
        canvases: (vision, each image's (rows, cols) of Llama 4's tiles)."""
        import moert
        return moert.load_images(self._plan, images, canvases=canvases)

    def expert_counts(self) -> Optional[list]:
        """Per MoE layer, the tokens each expert was selected for so far:
        [(layer name, [count per expert])], or None where the engine cannot
        tell."""
        return None

    def shutdown(self):
        """Refuses new sequences, finishes those submitted, and stops."""
        raise NotImplementedError


class _Cancelled(Exception):
    pass


class GeneratorSlots(Engine):
    """One moert.Generator (and so one KV cache) per slot, each made and
    driven by its own thread. moert releases the GIL while it generates, so
    the slots' sequences run at the same time, but each runs its own prefill
    and decode steps: no step is shared between sequences (no batching). A
    cancelled sequence's next on_token raises, which ends its generation
    there and frees the slot.

    With `mpi` (rank 0 of an expert-parallel plan under mpirun, one device
    per rank) the one slot's thread initialises MPI and makes every MPI
    call (MPI_THREAD_FUNNELED): it broadcasts each request to the other
    ranks, which run it in lockstep (`follow`), and at shutdown tells them
    to exit."""

    def __init__(self, plan, slots: int = 1, max_queue: int = 256,
                 threads: int = 0,
                 why: str = "the runtime has no batched scheduler",
                 mpi: bool = False):
        if slots < 1:
            raise ValueError(f"--slots is {slots}; it must be at least 1")
        if mpi and slots != 1:
            raise ValueError(f"--slots is {slots}; under mpirun every "
                             "generation spans all the ranks, so it must "
                             "be 1")
        if max_queue < 0:
            raise ValueError(f"--max-queue is {max_queue}; it must be 0 or "
                             "more")
        if threads == 0:
            threads = max(1, (os.cpu_count() or 1) // slots)
        self._plan = plan
        self.multimodal = plan.multimodal
        self._mpi = mpi
        self.threads = threads
        self._lock = threading.Condition()
        self._waiting = collections.deque()
        self._running = 0
        self._closing = False
        self._made = [None] * slots
        self._threads = [
            threading.Thread(target=self._serve, args=(k,),
                             name=f"moe-serve-slot-{k}", daemon=True)
            for k in range(slots)]
        for t in self._threads:
            t.start()
        with self._lock:
            while any(m is None for m in self._made):
                self._lock.wait()
        failed = [m for m in self._made if isinstance(m, BaseException)]
        if failed:
            self.shutdown()
            raise failed[0]
        first = self._made[0]
        self.max_seq = first.max_seq
        self.vocab_size = first.vocab_size
        self.num_devices = first.num_devices
        self.slots = slots
        self.max_queue = max_queue
        if mpi:
            self.mode = (f"one sequence at a time over {self.num_devices} "
                         "MPI ranks (rank 0 serves HTTP and broadcasts each "
                         "request; every rank runs its device)")
        elif slots == 1:
            self.mode = (f"one sequence at a time (1 slot; {why}, so "
                         "sequences do not share steps)")
        else:
            self.mode = (f"{slots} sequences at once, one moert.Generator "
                         f"per slot on its own thread ({threads} kernel "
                         "thread(s) each; moert releases the GIL while it "
                         f"generates); not batched: {why}, so each sequence "
                         "runs its own steps")

    def submit(self, request, on_token, on_finish):
        seq = Sequence(request, on_token, on_finish)
        with self._lock:
            if self._closing:
                raise EngineClosed("the server is shutting down")
            free = self.slots - self._running
            if len(self._waiting) >= free + self.max_queue:
                raise QueueFull(
                    f"{self._running} sequences are running and "
                    f"{len(self._waiting)} waiting, the most the server "
                    f"queues (--slots {self.slots}, --max-queue "
                    f"{self.max_queue})")
            self._waiting.append(seq)
            self._lock.notify()
        return seq

    def counts(self):
        with self._lock:
            return {"running": self._running,
                    "waiting": len(self._waiting),
                    "slots_in_use": self._running}

    def shutdown(self):
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        for t in self._threads:
            t.join()

    def _serve(self, k):
        import moert
        try:
            if self._mpi:
                moert.mpi_init()
            generator = moert.Generator(self._plan, threads=self.threads,
                                        mpi=self._mpi)
        except BaseException as e:  # raised by __init__
            generator = None
            with self._lock:
                self._made[k] = e
                self._lock.notify_all()
            return
        with self._lock:
            self._made[k] = generator
            self._lock.notify_all()
        try:
            while True:
                with self._lock:
                    while not self._waiting and not self._closing:
                        self._lock.wait()
                    if not self._waiting:
                        return
                    seq = self._waiting.popleft()
                    self._running += 1
                try:
                    self._run(generator, seq)
                finally:
                    with self._lock:
                        self._running -= 1
        finally:
            if self._mpi:
                moert.mpi_broadcast(json.dumps({"exit": True}).encode())
                del generator
                moert.mpi_finalize()

    def _run(self, generator, seq):
        seq.started = time.monotonic()
        if seq.cancelled:
            GeneratorSlots._finish(seq, "cancelled", None)
            return
        r = seq.request

        def on_token(token):
            if seq.cancelled:
                raise _Cancelled()
            if seq.first_token is None:
                seq.first_token = time.monotonic()
            seq.new_tokens += 1
            seq.on_token(token)
            if seq.cancelled:
                raise _Cancelled()

        arguments = dict(prompt=list(r.prompt),
                         max_new_tokens=r.max_new_tokens,
                         temperature=r.temperature, top_k=r.top_k,
                         top_p=r.top_p, seed=r.seed,
                         stop_ids=list(r.stop_ids))
        if self._mpi:
            import moert
            moert.mpi_broadcast(json.dumps(arguments).encode())
        try:
            ids = generator.generate(**arguments, vision=r.vision,
                                     on_token=on_token)
        except _Cancelled:
            GeneratorSlots._finish(seq, "cancelled", None)
            return
        except Exception as e:  # a prompt or options moert refuses
            seq.refused = isinstance(e, ValueError) and seq.new_tokens == 0
            GeneratorSlots._finish(seq, "error", f"{type(e).__name__}: {e}")
            return
        stopped = bool(ids) and ids[-1] in r.stop_ids
        GeneratorSlots._finish(seq, "stop" if stopped else "length", None)

    @staticmethod
    def _finish(seq, reason, error):
        seq.finished = time.monotonic()
        seq.finish_reason = reason
        seq.on_finish(reason, error)


class BatchedSlots(Engine):
    """moert.BatchGenerator, the runtime's continuous batching: one thread
    steps every running sequence together (decode rows of the running ones,
    prompt rows of new ones), over a KV pool of `slots` sequences; a plan
    the compiler could not prove batchable runs one sequence at a time, and
    `mode` says why."""

    def __init__(self, plan, slots: int = 1, max_queue: int = 256,
                 threads: int = 0):
        import moert
        if slots < 1:
            raise ValueError(f"--slots is {slots}; it must be at least 1")
        self._plan = plan
        self._batch = moert.BatchGenerator(plan, slots=slots,
                                           threads=threads)
        self.max_seq = self._batch.max_seq
        self.vocab_size = self._batch.vocab_size
        self.num_devices = 1
        self.slots = slots
        self.max_queue = max_queue
        blocker = self._batch.batch_blocker
        if blocker:
            self.mode = ("one sequence at a time (moert.BatchGenerator, "
                         f"{slots} slots): {blocker}")
        else:
            self.mode = (f"continuous batching over {slots} slots "
                         "(moert.BatchGenerator: each step runs the rows of "
                         "every running sequence together, at most "
                         f"{self._batch.max_step_rows} rows)")
            if os.environ.get("MOERT_BATCH_INVARIANT") == "1":
                self.mode += (", batch-invariant kernels: a sequence's "
                              "logits do not depend on the others")
        self._lock = threading.Condition()
        self._seqs = {}
        self._closing = False
        self._thread = threading.Thread(target=self._serve,
                                        name="moe-serve-batch", daemon=True)
        self._thread.start()

    def submit(self, request, on_token, on_finish):
        seq = Sequence(request, on_token, on_finish)
        with self._lock:
            if self._closing:
                raise EngineClosed("the server is shutting down")
            if len(self._seqs) >= self.slots + self.max_queue:
                running = self._batch.slots_in_use
                raise QueueFull(
                    f"{running} sequences are running and "
                    f"{len(self._seqs) - running} waiting, the most the "
                    f"server queues (--slots {self.slots}, --max-queue "
                    f"{self.max_queue})")
            r = request
            if r.vision is not None:
                raise ValueError("moert.BatchGenerator takes no images")
            sid = self._batch.add(
                r.prompt, max_new_tokens=r.max_new_tokens,
                temperature=r.temperature, top_k=r.top_k, top_p=r.top_p,
                seed=r.seed, stop_ids=list(r.stop_ids))
            self._seqs[sid] = seq
            self._lock.notify()
        return seq

    def counts(self):
        with self._lock:
            running = self._batch.slots_in_use
            return {"running": running,
                    "waiting": len(self._seqs) - running,
                    "slots_in_use": running}

    def expert_counts(self):
        return [(str(layer), list(row)) for layer, row in
                enumerate(self._batch.expert_selections())]

    def shutdown(self):
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        self._thread.join()

    def _serve(self):
        while True:
            with self._lock:
                while not self._seqs and not self._closing:
                    self._lock.wait()
                if not self._seqs:
                    return
                # A cancelled sequence leaves now, whether it runs or waits.
                for sid, seq in list(self._seqs.items()):
                    if seq.cancelled:
                        self._batch.cancel(sid)
                        del self._seqs[sid]
                        GeneratorSlots._finish(seq, "cancelled", None)
            try:
                events = self._batch.step()
            except Exception as e:  # the runtime failed a step: end them all
                with self._lock:
                    seqs, self._seqs = self._seqs, {}
                for sid, seq in seqs.items():
                    self._batch.cancel(sid)
                    GeneratorSlots._finish(seq, "error",
                                           f"{type(e).__name__}: {e}")
                continue
            now = time.monotonic()
            for sid, token, finish in events:
                with self._lock:
                    seq = self._seqs.get(sid)
                if seq is None:  # cancelled above
                    continue
                if token >= 0:
                    if seq.first_token is None:
                        seq.first_token = now
                    seq.new_tokens += 1
                    seq.on_token(token)
                if finish is not None:
                    with self._lock:
                        self._seqs.pop(sid, None)
                    GeneratorSlots._finish(seq, finish, None)


def follow(plan, threads: int = 0):
    """Ranks 1 .. N-1 of an expert-parallel plan under mpirun: runs this
    rank's device of every generation rank 0's GeneratorSlots(mpi=True)
    broadcasts, in lockstep with it (its on_token decides when to stop),
    until rank 0 says to exit. Returns the number of generations run."""
    import moert
    moert.mpi_init()
    generator = moert.Generator(plan, threads=threads, mpi=True)
    runs = 0
    while True:
        arguments = json.loads(moert.mpi_broadcast(None))
        if arguments.get("exit"):
            break
        try:
            generator.generate(**arguments, on_token=lambda token: None)
        except ValueError:
            pass  # rank 0 refused the same arguments and says so
        runs += 1
    del generator
    moert.mpi_finalize()
    return runs

