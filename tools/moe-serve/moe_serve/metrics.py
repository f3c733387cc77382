"""moe-serve's Prometheus metrics (prometheus_client), in a registry of
their own: request latencies and token counts as requests end, and the
engine's queue, slots and expert selections read at each scrape."""

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                    1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.ttft = Histogram(
            "moe_serve_time_to_first_token_seconds",
            "From the request's arrival to its first new token.",
            buckets=_LATENCY_BUCKETS, registry=r)
        self.tpot = Histogram(
            "moe_serve_time_per_output_token_seconds",
            "Per request: from its first to its last new token, divided by "
            "its new tokens after the first.",
            buckets=_LATENCY_BUCKETS, registry=r)
        self.prompt_tokens = Counter(
            "moe_serve_prompt_tokens", "Prompt tokens of accepted requests.",
            registry=r)
        self.generation_tokens = Counter(
            "moe_serve_generation_tokens", "New tokens generated.",
            registry=r)
        self.requests = Counter(
            "moe_serve_requests", "Requests that ended, by finish reason "
            "(stop, length, cancelled, error).", ["finish_reason"],
            registry=r)
        self.rejected = Counter(
            "moe_serve_requests_rejected",
            "Requests refused before they ran, by HTTP status.", ["status"],
            registry=r)
        self.engine = None
        r.register(_EngineCollector(self))

    def observe(self, seq):
        """Records a sequence that ended (engine.Sequence)."""
        self.requests.labels(seq.finish_reason).inc()
        self.generation_tokens.inc(seq.new_tokens)
        if seq.first_token is not None:
            self.ttft.observe(seq.first_token - seq.submitted)
            if seq.new_tokens > 1 and seq.finished is not None:
                self.tpot.observe((seq.finished - seq.first_token) /
                                  (seq.new_tokens - 1))


class _EngineCollector:
    def __init__(self, metrics):
        self._metrics = metrics

    def collect(self):
        engine = self._metrics.engine
        if engine is None:
            return
        counts = engine.counts()
        for name, key, text in (
                ("moe_serve_requests_running", "running",
                 "Sequences generating now."),
                ("moe_serve_requests_waiting", "waiting",
                 "Sequences waiting for a slot."),
                ("moe_serve_kv_slots_in_use", "slots_in_use",
                 "KV cache slots holding a sequence.")):
            yield GaugeMetricFamily(name, text, value=counts[key])
        yield GaugeMetricFamily("moe_serve_kv_slots",
                                "KV cache slots (--slots).",
                                value=engine.slots)
        experts = engine.expert_counts()
        if experts is not None:
            family = CounterMetricFamily(
                "moe_serve_expert_selections",
                "Tokens routed to each expert of each MoE layer.",
                labels=["layer", "expert"])
            for layer, row in experts:
                for expert, count in enumerate(row):
                    family.add_metric([str(layer), str(expert)], count)
            yield family
