"""The stated routing of a mixture-of-experts run: which experts a router's top-k gives each token on a virtual GPU.

Kernels do not run under emulation, so a router's scores read as zeros and its top-k would send every token to the
same experts. The capture layer (emulate/capture.py) hands the op-context hook (emulate/driver/csrc/opctx.cpp) the
writer :class:`Router`, and the hook calls it at the end of every **router top-k**: ``aten::topk`` over the last
dimension of floating scores with k below the candidates (at most 4096 of them, so a vocabulary's top-k is left
alone) and int64 ids. The writer fills the ids with the stated routing and the hook marks their bytes real
(emulate/driver/csrc/datapath.c). From there the hook's host replay carries the values the way the script computes
them (the routing map's fill and scatter, the per-expert sum, the cumulative offsets; an output sized by them,
such as ``nonzero``'s, is replayed when it starts so its count reads back), the count exchange's all-to-all or
all-gather carries them between ranks (datapath.c; split communicators know their members: nccl.c), and the host
reads them as a real run would: all-to-all split sizes, grouped-GEMM offsets (recorded with the op, so each
expert's m is known), per-expert loop bounds. That is the general path for data-dependent values: a source of
stated bytes, and host replay of the small ops that follow it.

Why the top-k: it is the one op every token-choice router shares (torchtitan's ``TokenChoiceTopKRouter``,
Megatron-core's ``topk_routing_with_score_function``, Hugging Face's Mixtral/Qwen-MoE blocks), whatever it does
afterwards (a one-hot map and a sum, ``histc``, ``bincount``, a sort): stating the ids, not the counts, keeps every
later value consistent with every other (the counts with the permutation, the sender's split sizes with the
receiver's), and needs no knowledge of a framework's dispatcher. Every rank gets the same per-expert shares of its
own tokens (a routing is a property of the model, not of the rank), so the experts hot on one rank are hot on all,
and the rank holding them receives the most tokens, as in a real skewed run. A top-k of the same form that is no
router (a classifier's top-5 accuracy over its classes) gets the routing too: its values read as zeros before, and
only the report's count of router calls (and its warning when no routing was stated) tells the difference.

Routings (``STEPCAST_MOE_ROUTING``, ``stepcast run --moe-routing``):

- ``balanced`` (the default): every expert gets tokens x k / experts routes (the remainder one each to the first).
- ``power:ALPHA``: one draw of aiconfigurator's power-law generator (:func:`estimator.moe_routing.power_law_counts`,
  fixed seed): each expert's share from a bounded Pareto density x^-ALPHA (aiconfigurator's tables use 1.01 and 1.2).
- ``histogram:FILE``: the shares of a token-to-expert histogram recorded on a real run (JSON: a list of counts per
  expert, or ``{"tokens_per_expert": [...]}``), scaled to each router's tokens x k; a top-k over another number of
  candidates than the histogram has (a group-limited router's top-k over expert groups) is left balanced.

Counts are rounded to sum tokens x k exactly with no expert above ``tokens`` (each token takes k distinct experts),
and laid out expert by expert: route j (of tokens x k) goes to token j mod tokens, so an expert's routes fall on
distinct tokens.
"""
from __future__ import annotations

import ctypes
import importlib.util
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stepcast.errors import InputError

BALANCED = "balanced"
POWER = "power"
HISTOGRAM = "histogram"
#: the C signature the op-context hook calls (opctx.cpp RouteFn): ids address, tokens, experts, k -> 1 written
ROUTE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_ulonglong, ctypes.c_longlong, ctypes.c_longlong,
                            ctypes.c_longlong)


class RoutingError(InputError):
    """A routing that cannot be stated as given; one line naming the setting or file and what was expected."""


@dataclass(frozen=True)
class Routing:
    """A parsed routing setting: its kind, the power law's alpha, or the histogram's per-expert counts."""

    kind: str
    alpha: float = 0.0
    histogram: tuple[float, ...] = ()
    source: str = ""

    def describe(self) -> str:
        """The routing in words, for the report."""
        if self.kind == POWER:
            return (f"power law, alpha {self.alpha:g} (aiconfigurator's generator, one draw, seed "
                    f"{_generator().SEED}; the same expert shares on every rank)")
        if self.kind == HISTOGRAM:
            return f"histogram of {len(self.histogram)} experts from {self.source} (the same shares on every rank)"
        return "balanced (every expert gets tokens x top-k / experts)"


def parse(text: str | None, label: str = "STEPCAST_MOE_ROUTING") -> Routing:
    """The routing ``text`` states (None or empty: balanced); :class:`RoutingError` names ``label``."""
    text = (text or "").strip()
    if text in ("", BALANCED):
        return Routing(BALANCED)
    kind, _, value = text.partition(":")
    if kind == POWER:
        try:
            alpha = float(value)
        except ValueError:
            alpha = float("nan")
        if not np.isfinite(alpha) or alpha <= 0:
            raise RoutingError(f"{label}: expected power:ALPHA with ALPHA a positive number, found {text!r}")
        return Routing(POWER, alpha=alpha)
    if kind == HISTOGRAM and value:
        return Routing(HISTOGRAM, histogram=read_histogram(Path(value), label), source=value)
    raise RoutingError(f"{label}: expected balanced, power:ALPHA or histogram:FILE, found {text!r}")


def read_histogram(path: Path, label: str) -> tuple[float, ...]:
    """Per-expert token counts from a JSON file (a list, or an object's ``tokens_per_expert``)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RoutingError(f"{label}: expected a readable JSON histogram file, found {path} ({exc})") from None
    counts = doc.get("tokens_per_expert") if isinstance(doc, dict) else doc
    if (not isinstance(counts, list) or len(counts) < 2
            or not all(isinstance(c, (int, float)) and not isinstance(c, bool) and c >= 0 for c in counts)
            or not sum(counts) > 0):
        raise RoutingError(f"{label}: expected {path} to hold a list of at least 2 non-negative counts per expert "
                           "(or {\"tokens_per_expert\": [...]}) with a positive sum")
    return tuple(float(c) for c in counts)


def _generator() -> Any:
    """estimator/moe_routing.py, loaded by its path: inside a rank nothing of the project is on ``sys.path``."""
    name = "_stepcast_moe_routing"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "estimator" / "moe_routing.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _fit(shares: np.ndarray, routes: int, cap: int) -> np.ndarray:
    """Whole counts in proportion to ``shares`` summing to ``routes``, none above ``cap``: an expert whose share
    exceeds the cap is held at it and the rest shared among the others; rounding by largest remainders."""
    shares = np.asarray(shares, dtype=np.float64)
    counts = np.zeros(len(shares), dtype=np.int64)
    open_ = np.ones(len(shares), dtype=bool)
    while True:
        left = routes - int(counts[~open_].sum())
        weights = np.where(open_, shares, 0.0)
        if weights.sum() <= 0:
            weights = open_.astype(np.float64)
        ideal = left * weights / weights.sum()
        over = open_ & (ideal > cap)
        if over.any():
            counts[over] = cap
            open_ &= ~over
            continue
        base = np.floor(ideal)
        extra = np.argsort(-(ideal - base), kind="stable")[:int(round(left - base.sum()))]
        base[extra] += 1  # each has a fraction, so base < ideal <= cap before the +1
        counts[open_] = base[open_].astype(np.int64)
        return counts


def expert_counts(routing: Routing, tokens: int, experts: int, topk: int) -> np.ndarray:
    """Routes per expert of one router call: ``tokens`` x ``topk`` in all, none above ``tokens``."""
    routes = tokens * topk
    if routing.kind == POWER:
        shares = _generator().power_law_counts(tokens, experts, topk, routing.alpha, draws=1)[0]
    elif routing.kind == HISTOGRAM:
        if len(routing.histogram) != experts:
            raise RoutingError(f"STEPCAST_MOE_ROUTING: expected a histogram of {experts} experts (a router chose "
                               f"{topk} of {experts}), found {len(routing.histogram)} in {routing.source}")
        shares = np.asarray(routing.histogram)
    else:
        shares = np.ones(experts)
    return _fit(shares, routes, tokens)


def assignment(counts: np.ndarray, tokens: int, topk: int) -> np.ndarray:
    """(tokens, topk) expert ids with ``counts[e]`` routes to expert e: routes laid out expert by expert, route j to
    token j mod tokens as its choice j // tokens, so no token gets an expert twice (each expert has <= tokens)."""
    flat = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    return np.ascontiguousarray(flat.reshape(topk, tokens).T)


@dataclass
class Router:
    """The writer the op-context hook calls at each router top-k (module docstring); keeps what it routed."""

    routing: Routing
    stated: bool
    calls: dict[tuple[int, int, int], int] = field(default_factory=dict)
    _ids: dict[tuple[int, int, int], np.ndarray] = field(default_factory=dict)
    error: str | None = None

    def routing_for(self, experts: int) -> Routing:
        """The routing a top-k over ``experts`` candidates gets: the stated one, except that a histogram of another
        number of experts leaves it balanced (a group-limited router's top-k over its expert groups, say)."""
        if self.routing.kind == HISTOGRAM and len(self.routing.histogram) != experts:
            return Routing(BALANCED)
        return self.routing

    def ids(self, tokens: int, experts: int, topk: int) -> np.ndarray:
        key = (tokens, experts, topk)
        if key not in self._ids:
            counts = expert_counts(self.routing_for(experts), tokens, experts, topk)
            self._ids[key] = assignment(counts, tokens, topk)
        return self._ids[key]

    def write(self, address: int, tokens: int, experts: int, topk: int) -> int:
        """Write the ids of one call at ``address`` (host-addressable device memory); 1 done, 0 left alone. Never
        raises: it runs inside torch's op, and the first failure is kept for the report."""
        try:
            ids = self.ids(int(tokens), int(experts), int(topk))
            ctypes.memmove(address, ids.ctypes.data, ids.nbytes)
        except Exception as exc:  # noqa: BLE001 (a callback must not raise into C)
            self.error = self.error or f"{type(exc).__name__}: {exc}"
            return 0
        key = (int(tokens), int(experts), int(topk))
        self.calls[key] = self.calls.get(key, 0) + 1
        return 1

    def record(self) -> dict[str, Any]:
        """What the op table keeps (``moe_routing``): the routing, whether it was stated, and each router shape's
        calls with its busiest and mean expert's routes."""
        routers = []
        for (tokens, experts, topk), calls in sorted(self.calls.items()):
            counts = np.bincount(self.ids(tokens, experts, topk).ravel(), minlength=experts)
            routers.append({"tokens": tokens, "experts": experts, "topk": topk, "calls": calls,
                            "routing": self.routing_for(experts).kind,
                            "busiest_expert_routes": int(counts.max()), "mean_expert_routes": float(counts.mean())})
        return {"routing": self.routing.describe(), "stated": self.stated, "routers": routers, "error": self.error}


def summarize(records: list[dict[str, Any] | None]) -> tuple[dict[str, Any] | None, list[str]]:
    """The report's ``moe_routing`` from the ranks' records (:meth:`Router.record`) and its warnings: None when no
    rank saw a router and none was stated. Router shapes are listed once, their calls summed over ranks."""
    records = [r for r in records if isinstance(r, dict)]
    if not records:
        return None, []
    routers: dict[tuple[int, int, int], dict[str, Any]] = {}
    for record in records:
        for r in record.get("routers") or []:
            key = (r["tokens"], r["experts"], r["topk"])
            entry = routers.setdefault(key, {**r, "calls": 0})
            entry["calls"] += r["calls"]
    stated = any(r.get("stated") for r in records)
    if not routers and not stated:
        return None, []
    errors = sorted({r["error"] for r in records if r.get("error")})
    field_ = {"routing": records[0].get("routing"), "stated": stated, "routers": list(routers.values()),
              "errors": errors}
    warnings = []
    if routers and not stated:
        warnings.append(f"mixture-of-experts routers were seen ({sum(r['calls'] for r in routers.values())} top-k "
                        "calls) and no routing was stated: they were given a balanced routing (--moe-routing "
                        "power:ALPHA or histogram:FILE states another)")
    if stated and not routers:
        warnings.append("a MoE routing was stated, but no router top-k was seen (routers are torch.topk over the "
                        "last dimension of floating scores, k < candidates <= 4096)")
    warnings += [f"MoE routing: {e}" for e in errors]
    return field_, warnings


def install(opctx: ctypes.CDLL, text: str | None) -> tuple[Router, Any]:
    """Give the op-context hook library ``opctx`` the writer of routing ``text`` (None or empty: balanced, not
    stated). Returns the writer and the C callback, which the caller must keep alive."""
    router = Router(parse(text), stated=bool(text and text.strip()))
    callback = ROUTE_FN(router.write)
    opctx.stepcast_opctx_set_router.argtypes = [ROUTE_FN]
    opctx.stepcast_opctx_set_router.restype = None
    opctx.stepcast_opctx_set_router(callback)
    return router, callback
