"""Which parts of its context a model answer depends on: attribution by ablation.

ContextCite's method (Cohen-Wang, Shah, Georgiev, Mądry, NeurIPS 2024), on a session's
request as its framework built it:

1. The request's messages are the units (the system prompt, the tool definitions, every
   message; a tool result is a unit of its own), or, finer, each text part or sentence of
   them (:mod:`analysis._units`).
2. ``K`` ablations each remove a random half of the units. The session's request source
   builds each ablated request (:func:`ablated_request`), so every framework the
   workbench reads is ablated the way it sends requests.
3. Each ablated request is scored: the log-odds of the original answer under it
   (:class:`replay.Scored`, teacher forcing on the local llama.cpp server).
4. A sparse linear surrogate (LASSO) fitted to (which units were kept, score) gives a
   weight per unit: how much keeping that unit raises the answer's log-odds. "The answer
   leans on the tool result of search #3 (+2.1)".

How far to trust the weights is measured on every attribution, not assumed:

* **top-k drop**: the score lost when the top 1, 3 and 5 units are removed, against
  removing as many units at random (a faithful ranking loses more);
* **LDS** (linear datamodeling score): the Spearman correlation, on held-out random
  ablations the surrogate was not fitted to, between the scores it predicts and the
  scores measured.

A result is kept beside the session (``attributions/``) so the pages show it again.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from analysis._drift import sent_at
from analysis._lab import Strategy, history_of, parse_strategy
from analysis._units import Unit, ablated_request, request_units, unit_count
from replay import Materialized, Score
from soap_core import (
    Message,
    Session,
    SoapError,
    Store,
    chat_message,
    new_record_id,
    read_attributions,
    utc_now,
    write_attribution,
)

KEEP = 0.5
"""The chance that a random ablation keeps a unit (ContextCite's default)."""
LASSO_ALPHA = 0.01
"""The surrogate's L1 penalty (ContextCite's default, on the same log-odds scale)."""
TOP_K = (1, 3, 5)
RANDOM_DRAWS = 3
"""Random removals of k units each top-k drop is compared with."""
LARGE_RUN_TOKENS = 1_000_000
"""Prompt tokens above which the command line asks for --yes before it starts."""
NOISE_RUNS = 3
"""Unchanged re-runs of the whole request a noisy scorer (regenerate-and-compare) makes:
their spread is the band a weight must clear."""


class AttributionError(SoapError):
    """An answer that cannot be attributed (no units, a message the model did not write)."""


class Scorer(Protocol):
    """What scores an answer under a request: :class:`replay.ServerScorer` (teacher-forced
    log-odds) or :class:`replay.RegenerateScorer` (the weaker method, ``noisy``)."""

    method: str
    base_url: str
    noisy: bool

    def score(self, request: dict[str, Any], answer: dict[str, Any]) -> Score: ...


def answer_of(session: Session, found: Materialized) -> Message:
    """The message the call behind ``found`` produced."""
    context = session.contexts[found.context_id]
    if found.index >= len(context.messages):
        raise AttributionError(f"message {found.index} of context {found.context_id} does not exist yet")
    answer = context.messages[found.index]
    if answer.role != "assistant":
        raise AttributionError(
            f"message {found.index} of context {found.context_id} is a {answer.role} message, not a model answer"
        )
    return answer


def answer_dict(answer: Message) -> dict[str, Any]:
    """The answer as an OpenAI assistant message (text and tool calls)."""
    [shaped] = chat_message(answer)
    return dict(shaped)


@dataclass
class Attribution:
    """One answer's attribution to its request's units, with its faithfulness."""

    session: str
    context_id: str
    index: int
    message_id: str | None
    source: str
    unit: str
    units: list[Unit]
    weights: list[float]
    intercept: float
    full_logit: float
    full_logprob: float
    ablations: list[dict[str, Any]]
    """Every scored request: ``removed`` (unit indices), ``logit``, ``set`` (train,
    held-out, top-k, random)."""
    lds: float | None
    top_k: list[dict[str, Any]]
    """Per k: ``drop`` (top k removed) and ``random_drop`` (k random, the mean)."""
    method: str
    endpoint: str
    model: str | None
    seed: int
    seconds: float
    created_at: str = field(default_factory=utc_now)
    id: str | None = None
    noise: list[float] = field(default_factory=list)
    """A noisy scorer's scores of the unchanged request (empty for teacher forcing,
    which repeats its numbers)."""

    @property
    def calls(self) -> int:
        """Model calls it took (each a scored request, the unablated ones included)."""
        return len(self.ablations) + max(1, len(self.noise))

    @property
    def band(self) -> float:
        """How far apart the unchanged re-runs scored (0 for teacher forcing)."""
        return max(self.noise) - min(self.noise) if self.noise else 0.0

    def ranked(self) -> list[tuple[Unit, float]]:
        """Units with their weights, the most relied on first (ties by position)."""
        pairs = list(zip(self.units, self.weights, strict=True))
        return sorted(pairs, key=lambda pair: (-pair[1], pair[0].index))

    def weight_meaning(self) -> str:
        """What a message's weight is, in words for a reader (its badge's help)."""
        scale = (
            "the similarity to the linked answer of the answer regenerated with it (weaker method)"
            if self.noise
            else "the log-odds of the linked answer"
        )
        pieces = (
            "" if self.unit == "message" else f"; by {self.unit}: the {self.unit} of it that moves it most"
        )
        return f"What keeping this message adds to {scale} (its attribution{pieces})"

    def message_weights(self) -> dict[str, tuple[float, Unit]]:
        """Each session message's weight and the unit it is of: the message's own, or,
        where it was cut into parts or sentences, its piece that moves the answer most
        (either way; the first among equals)."""
        weights: dict[str, tuple[float, Unit]] = {}
        for unit, weight in zip(self.units, self.weights, strict=True):
            if unit.message_id is None:
                continue
            if unit.message_id not in weights or abs(weight) > abs(weights[unit.message_id][0]):
                weights[unit.message_id] = (weight, unit)
        return weights

    def summary(self, most: int = 3) -> str:
        """'the answer leans on X (+2.1), Y (+0.8)', or says it leans on none."""
        leaning = [(u, w) for u, w in self.ranked() if w > 0][:most]
        if not leaning:
            return "the answer leans on no single unit more than the rest"
        return "the answer leans on " + ", ".join(f"{u.label} ({w:+.1f})" for u, w in leaning)

    @property
    def fitted_on(self) -> int:
        """The ablations the weights were fitted to (the held-out and top-k ones apart)."""
        return sum(1 for a in self.ablations if a.get("set") == "train")

    def trust(self) -> str:
        """The faithfulness figures in one line: what the top units' removal costs
        against as many random ones, and the LDS; first, where the weights outnumber the
        ablations they were fitted to, that the fit is underdetermined."""
        caution = (
            f"Fitted on {self.fitted_on} ablations for {len(self.units)} {self.unit}s: with fewer ablations "
            "than units the fit is underdetermined, so read the ranking as a hint unless the drops and the "
            "LDS below bear it out. "
            if 0 < self.fitted_on < len(self.units)
            else ""
        )
        return caution + self._figures()

    def _figures(self) -> str:
        drops = "; ".join(
            f"top {t['k']} removed {t['drop']:+.1f} vs {t['random_drop']:+.1f} at random" for t in self.top_k
        )
        lds = f"{self.lds:.2f}" if self.lds is not None else "n/a (the held-out scores do not vary)"
        if not self.noise:
            return f"log-odds lost: {drops or 'n/a (too few units)'}. LDS on held-out ablations: {lds}"
        return (
            f"weaker method, regenerate-and-compare: weights are changes in the regenerated answer's "
            f"similarity to this one (0 to 1). Unchanged re-runs scored {min(self.noise):.2f} to "
            f"{max(self.noise):.2f}: a weight under {self.band:.2f} is within that noise. "
            f"Similarity lost: {drops or 'n/a (too few units)'}. LDS on held-out ablations: {lds}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "context_id": self.context_id,
            "index": self.index,
            "message_id": self.message_id,
            "source": self.source,
            "unit": self.unit,
            "units": [u.as_dict() for u in self.units],
            "weights": self.weights,
            "intercept": self.intercept,
            "full_logit": self.full_logit,
            "full_logprob": self.full_logprob,
            "ablations": self.ablations,
            "lds": self.lds,
            "top_k": self.top_k,
            "method": self.method,
            "endpoint": self.endpoint,
            "model": self.model,
            "seed": self.seed,
            "seconds": self.seconds,
            "calls": self.calls,
            "created_at": self.created_at,
            "summary": self.summary(),
            "trust": self.trust(),
            "ranked": [
                {"index": u.index, "at": u.at, "label": u.label, "weight": w} for u, w in self.ranked()
            ],
            "noise": self.noise,
            "id": self.id,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Attribution:
        return cls(
            session=data["session"],
            context_id=data["context_id"],
            index=int(data["index"]),
            message_id=data.get("message_id"),
            source=data.get("source", "soapwb"),
            unit=data.get("unit", "message"),
            units=[Unit.from_dict(u) for u in data["units"]],
            weights=[float(w) for w in data["weights"]],
            intercept=float(data["intercept"]),
            full_logit=float(data["full_logit"]),
            full_logprob=float(data["full_logprob"]),
            ablations=list(data["ablations"]),
            lds=data.get("lds"),
            top_k=list(data.get("top_k", [])),
            method=data.get("method", ""),
            endpoint=data.get("endpoint", ""),
            model=data.get("model"),
            seed=int(data.get("seed", 0)),
            seconds=float(data.get("seconds", 0.0)),
            created_at=data.get("created_at", ""),
            id=data.get("id"),
            noise=[float(x) for x in data.get("noise", [])],
        )


def _random_removals(rng: random.Random, n: int, count: int) -> list[frozenset[int]]:
    """``count`` random removals, each unit kept with chance KEEP; one that would remove
    every unit (an empty request, which no model answers) is drawn again."""
    removals: list[frozenset[int]] = []
    while len(removals) < count:
        removed = frozenset(i for i in range(n) if rng.random() >= KEEP)
        if len(removed) < n:
            removals.append(removed)
    return removals


def planned_calls(units: int, ablations: int, held_out: int, noisy: bool = False) -> int:
    """The scored requests an attribution makes: the whole request (NOISE_RUNS times for
    a noisy scorer), the ablations, the held-out ones and the top-k comparisons."""
    ks = [k for k in TOP_K if k < units]
    return (NOISE_RUNS if noisy else 1) + ablations + held_out + len(ks) * (1 + RANDOM_DRAWS)


def default_held_out(ablations: int) -> int:
    return max(4, ablations // 4)


def estimate_calls(found: Materialized, ablations: int, noisy: bool = False, unit: str = "message") -> int:
    """The scored requests an attribution of ``found`` makes."""
    return planned_calls(unit_count(found, unit), ablations, default_held_out(ablations), noisy)


def estimate_tokens(
    found: Materialized, ablations: int, noisy: bool = False, unit: str = "message"
) -> tuple[int, int]:
    """(scored requests, prompt tokens about): an ablation keeps half the units."""
    units = request_units(found, unit)
    total = sum(u.tokens for u in units)
    calls = planned_calls(len(units), ablations, default_held_out(ablations), noisy)
    return calls, total + (calls - 1) * total // 2


def fit_surrogate(kept: Sequence[Sequence[float]], scores: Sequence[float]) -> tuple[list[float], float]:
    """LASSO weights (one per unit) and intercept, scores ~ intercept + kept · weights."""
    import numpy as np
    from sklearn.linear_model import Lasso

    model = Lasso(alpha=LASSO_ALPHA, max_iter=10_000)
    model.fit(np.asarray(kept, dtype=float), np.asarray(scores, dtype=float))
    return [float(w) for w in model.coef_], float(model.intercept_)


def spearman(predicted: Sequence[float], actual: Sequence[float]) -> float | None:
    """Their rank correlation; None where either does not vary (no ranking to compare)."""
    if len(set(predicted)) < 2 or len(set(actual)) < 2:
        return None
    from scipy.stats import spearmanr

    value = float(spearmanr(predicted, actual).statistic)
    return None if math.isnan(value) else value


Scores = Callable[[Sequence[frozenset[int]]], list[tuple[float, float, frozenset[int]]]]
"""Scores a batch of removals (unit positions): each one's (logit, logprob, the units it
in fact removed), in order. :func:`score_removals` in this process, or the batch engine
(``soapwb attribute --engine``)."""


def score_removals(
    found: Materialized,
    units: Sequence[Unit],
    scorer: Scorer,
    answer: dict[str, Any],
    removals: Sequence[frozenset[int]],
    *,
    cache: dict[frozenset[int], tuple[float, float]] | None = None,
    on_scored: Callable[[], None] | None = None,
) -> list[tuple[float, float, frozenset[int]]]:
    """Each removal's (logit, logprob, units gone), built by the session's request source.
    The requests go in the order of the units they keep, so those that keep the same
    first units follow each other and a server that keeps the last prompt's state
    evaluates only where they part. A removal that takes out what another took out is
    scored once (``cache``), except the empty one, the whole request: each is a re-run
    (a noisy scorer's noise band)."""
    n = len(units)
    cache = {} if cache is None else cache
    built = [ablated_request(found, r, units) if r else (found.request, frozenset[int]()) for r in removals]
    scored: list[tuple[float, float, frozenset[int]]] = [(0.0, 0.0, frozenset())] * len(built)
    for i in sorted(range(len(built)), key=lambda i: [j not in built[i][1] for j in range(n)]):
        request, gone = built[i]
        if not gone or gone not in cache:
            score = scorer.score(request, answer)
            cache[gone] = (score.logit, score.logprob)
        scored[i] = (*cache[gone], gone)
        if on_scored is not None:
            on_scored()
    return scored


def score_ablations(
    session: Session, found: Materialized, unit: str, scorer: Scorer, removals: Sequence[frozenset[int]]
) -> list[tuple[float, float, frozenset[int]]]:
    """:func:`score_removals` of the answer behind ``found`` at ``unit``: what a batch
    engine's worker runs on its share of an attribution."""
    answer = answer_dict(answer_of(session, found))
    return score_removals(found, request_units(found, unit), scorer, answer, removals)


def attribute(
    session: Session,
    found: Materialized,
    scorer: Scorer,
    *,
    ablations: int = 32,
    held_out: int | None = None,
    seed: int = 0,
    unit: str = "message",
    on_progress: Callable[[int, int], None] | None = None,
    scores: Scores | None = None,
) -> Attribution:
    """Attribute the answer behind ``found`` to its request's units of size ``unit``
    (``message``, ``part`` or ``sentence``: :mod:`analysis._units`; module docstring).

    The scored requests go in two batches: the whole request (:data:`NOISE_RUNS` times
    for a noisy scorer), the ablations and the held-out ones; then, once the weights are
    fitted, the top-k removals and the random ones they are compared with. ``scores``
    scores each batch elsewhere (the batch engine); ``scorer`` then only names the
    method and endpoint, and progress is told per batch."""
    started = time.monotonic()
    answer = answer_dict(answer_of(session, found))
    units = request_units(found, unit)
    n = len(units)
    if n < 2:
        raise AttributionError(f"the request behind message {found.index} has {n} {unit}: nothing to compare")
    if ablations < 2:
        raise AttributionError("attribution needs at least 2 ablations")
    held = default_held_out(ablations) if held_out is None else held_out
    rng = random.Random(seed)
    total = planned_calls(n, ablations, held, scorer.noisy)
    done = 0

    def tick(count: int = 1) -> None:
        nonlocal done
        done += count
        if on_progress is not None:
            on_progress(done, total)

    cache: dict[frozenset[int], tuple[float, float]] = {}

    whole_logprob = 0.0

    def score_batch(removals: Sequence[frozenset[int]]) -> list[tuple[float, frozenset[int]]]:
        nonlocal whole_logprob
        if scores is None:
            got = score_removals(found, units, scorer, answer, removals, cache=cache, on_scored=tick)
        else:
            got = scores(removals)
            tick(len(removals))
        whole_logprob = next((logprob for _, logprob, gone in got if not gone), whole_logprob)
        return [(logit, gone) for logit, _, gone in got]

    runs = NOISE_RUNS if scorer.noisy else 1
    train_removals = _random_removals(rng, n, ablations)
    test_removals = _random_removals(rng, n, held)
    first = score_batch([frozenset[int]()] * runs + train_removals + test_removals)
    unchanged = [logit for logit, _ in first[:runs]]
    train, test = first[runs : runs + ablations], first[runs + ablations :]
    whole_logit = math.fsum(unchanged) / len(unchanged)
    kept = [[0.0 if i in gone else 1.0 for i in range(n)] for _, gone in train]
    weights, intercept = fit_surrogate(kept, [logit for logit, _ in train])
    predicted = [intercept + sum(w for i, w in enumerate(weights) if i not in gone) for _, gone in test]
    lds = spearman(predicted, [logit for logit, _ in test]) if test else None
    order = sorted(range(n), key=lambda i: (-weights[i], i))
    ks = [k for k in TOP_K if k < n]
    second: list[frozenset[int]] = []
    for k in ks:
        second.append(frozenset(order[:k]))
        second += [frozenset(rng.sample(range(n), k)) for _ in range(RANDOM_DRAWS)]
    compared = score_batch(second) if second else []
    top_k, extra = [], []
    for at, k in enumerate(ks):
        (top, gone), *randoms = compared[at * (1 + RANDOM_DRAWS) : (at + 1) * (1 + RANDOM_DRAWS)]
        extra.append({"removed": sorted(gone), "logit": top, "set": f"top-{k}"})
        extra += [{"removed": sorted(g), "logit": s, "set": f"random-{k}"} for s, g in randoms]
        top_k.append(
            {
                "k": k,
                "drop": whole_logit - top,
                "random_drop": math.fsum(whole_logit - s for s, _ in randoms) / len(randoms),
            }
        )
    return Attribution(
        session=session.uuid,
        context_id=found.context_id,
        index=found.index,
        message_id=found.message_id,
        source=found.source,
        unit=unit,
        units=units,
        weights=weights,
        intercept=intercept,
        full_logit=whole_logit,
        full_logprob=whole_logit if scorer.noisy else whole_logprob,
        ablations=[
            *({"removed": sorted(g), "logit": s, "set": "train"} for s, g in train),
            *({"removed": sorted(g), "logit": s, "set": "held-out"} for s, g in test),
            *extra,
        ],
        lds=lds,
        top_k=top_k,
        method=scorer.method,
        endpoint=scorer.base_url,
        model=found.parameters.get("model"),
        seed=seed,
        seconds=time.monotonic() - started,
        noise=unchanged if scorer.noisy else [],
    )


def save_attribution(store: Store, session: Session, attribution: Attribution) -> Attribution:
    """Keep ``attribution`` beside ``session``; it comes back with its record id."""
    record_id = attribution.id or new_record_id()
    directory = store.folder_of(session)
    write_attribution(directory, record_id, attribution.as_dict())
    attribution.id = record_id
    return attribution


def saved_attributions(
    session: Session, *, store: Store | None = None, errors: list[SoapError] | None = None
) -> list[Attribution]:
    """The attributions kept beside ``session``, oldest first (``store`` finds its folder
    for a session made in this process rather than loaded)."""
    directory = store.folder_of(session) if store else session.directory
    if directory is None:
        return []
    return [Attribution.from_dict(data) for data in read_attributions(directory, errors=errors)]


def latest_attribution(
    session: Session, context_id: str, index: int, *, store: Store | None = None
) -> Attribution | None:
    """The newest attribution of the answer at ``index`` of ``context_id``, if any."""
    found = [
        a
        for a in saved_attributions(session, store=store, errors=[])
        if (a.context_id, a.index) == (context_id, index)
    ]
    return found[-1] if found else None


@dataclass(frozen=True)
class MessageUse:
    """How much a session's attributed answers lean on one message."""

    message_id: str
    use: float
    """The largest weight any attributed answer gave it."""
    answers: int
    """The attributed answers whose requests held it."""
    leaning: int
    """Of those, the answers that gave it a positive weight."""
    label: str
    preview: str


def message_uses(attributions: Sequence[Attribution]) -> list[MessageUse]:
    """Every message the attributed answers saw, the most used first (each answer's
    newest attribution only; units without a message id, from records written before
    ids were kept, are left out). Weights of the two methods are on different scales
    (log-odds, similarity): where any answer is scored, regenerated ones are left out."""
    newest = {(a.context_id, a.index): a for a in attributions}
    scored = [a for a in newest.values() if not a.noise]
    seen: dict[str, list[tuple[float, Unit]]] = {}
    for attribution in scored or newest.values():
        for unit, weight in zip(attribution.units, attribution.weights, strict=True):
            if unit.message_id is not None:
                seen.setdefault(unit.message_id, []).append((weight, unit))
    uses = [
        MessageUse(
            message_id,
            max(w for w, _ in found),
            len(found),
            sum(1 for w, _ in found if w > 0),
            found[0][1].label,
            found[0][1].preview,
        )
        for message_id, found in seen.items()
    ]
    return sorted(uses, key=lambda u: -u.use)


def message_usage(attributions: Sequence[Attribution]) -> dict[str, float]:
    """Each message's use (:func:`message_uses`), what :class:`analysis.LeastUsed` drops by."""
    return {u.message_id: u.use for u in message_uses(attributions)}


def session_usage(session: Session, *, store: Store | None = None) -> dict[str, float]:
    """:func:`message_usage` of every attribution kept beside ``session`` (an unreadable
    record is left out: :func:`saved_attributions` names it where it is shown)."""
    return message_usage(saved_attributions(session, store=store, errors=[]))


def lab_strategies(session: Session, specs: Sequence[str], *, store: Store | None = None) -> list[Strategy]:
    """The compaction lab's strategies for ``specs`` on ``session``: least-used drops by
    the session's kept attributions (read only when a spec asks for it)."""
    wanted = any(spec.split(":", 1)[0] == "least-used" for spec in specs)
    usage = session_usage(session, store=store) if wanted else {}
    return [parse_strategy(spec, usage) for spec in specs]


def attribute_calls(
    store: Store,
    session: Session,
    calls: Sequence[int],
    scorer: Scorer,
    *,
    ablations: int = 16,
    seed: int = 0,
    on_progress: Callable[[int, int, int], None] | None = None,
) -> list[Attribution]:
    """Attribute the answers of ``calls`` (numbers of :func:`analysis.history_of`), each
    from the request as the session sent it, and keep each beside the session as it is
    made (a run stopped halfway keeps what it made). ``on_progress(call, done, total)``."""
    history = history_of(session)
    found = [sent_at(session, history, call) for call in calls]  # a bad call fails before any model call
    made = []
    for call, request in zip(calls, found, strict=True):

        def progress(done: int, total: int, call: int = call) -> None:
            if on_progress is not None:
                on_progress(call, done, total)

        result = attribute(session, request, scorer, ablations=ablations, seed=seed, on_progress=progress)
        made.append(save_attribution(store, session, result))
    return made
