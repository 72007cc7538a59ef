"""An answer's kept attribution on the Context page (issue 29, point 1): a linked model
answer shows what it leans on above the transcript, with the heat strip, and every
message it saw carries its weight in the transcript itself. The weights here are set
by hand: what the model makes of them is tests/test_attribution.py's; this is what the
page draws from a kept record."""

from __future__ import annotations

import json
from pathlib import Path

from analysis import Attribution, request_units, save_attribution
from replay import materialize
from soap_core import Context, Message, Session, Store, TextPart
from tests.apptest import open_app_page

EVIL = "<script>alert(1)</script>"


def answered(store: Store) -> Session:
    context = Context.create("You answer with facts from the conversation.")
    for text in ("The secret code is 4721.", f"Bananas are yellow. {EVIL}", "What is the secret code?"):
        context.append(Message.create("user", [TextPart(text)]))
    context.append(Message.create("assistant", [TextPart("The secret code is 4721.")]))
    context.append(Message.create("user", [TextPart("Thanks.")]))
    context.append(Message.create("assistant", [TextPart("You are welcome.")]))
    session = Session.create("Answering", context)
    store.save_session(session)
    return session


def kept_attribution(
    store: Store,
    session: Session,
    weights: list[float],
    unit: str = "message",
    noise: list[float] | None = None,
) -> Attribution:
    found = materialize(session, None, 4)
    units = request_units(found, unit)
    made = Attribution(
        session=session.uuid,
        context_id=found.context_id,
        index=found.index,
        message_id=found.message_id,
        source=found.source,
        unit=unit,
        units=units,
        weights=weights,
        intercept=0.0,
        full_logit=1.0,
        full_logprob=-0.5,
        ablations=[],
        lds=0.7,
        top_k=[{"k": 1, "drop": 3.0, "random_drop": 0.5}],
        method="by hand",
        endpoint="",
        model=None,
        seed=0,
        seconds=1.0,
        noise=noise or [],
    )
    return save_attribution(store, session, made)


def badges(at: object) -> list[str]:
    return [m.value for m in at.markdown if "-badge[" in m.value]  # type: ignore[attr-defined]


def test_a_linked_answer_shows_its_attribution_and_each_message_its_weight(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    session = answered(store)
    weights = [0.1, 2.5, -0.4, 0.0]  # the system prompt, the code, the bananas, the question
    kept = kept_attribution(store, session, weights)
    at = open_app_page(store.root, "context", session=session.uuid, message="4")
    assert not at.exception and not at.error
    [expander] = [e for e in at.expander if e.label == "Why the answer at message 4"]
    said = [m.value.replace("\\", "") for m in at.markdown]
    assert "The answer leans on user message #1 (+2.5), the system prompt (+0.1)." in said
    figure = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert figure["data"][0]["type"] == "heatmap" and figure["data"][0]["z"] == [weights]
    assert all(EVIL not in text for text in figure["data"][0]["text"][0])  # hover text escaped
    [ranked] = [d.value for d in at.dataframe if "weight" in d.value.columns]
    assert ranked["weight"].tolist() == [2.5, 0.1, 0.0, -0.4]
    # the transcript: the four messages the answer saw, each with its weight, coloured by sign
    assert badges(at) == [
        ":red-badge[:material/thermostat: +0.10 to the answer at message 4]",
        ":red-badge[:material/thermostat: +2.50 to the answer at message 4]",
        ":blue-badge[:material/thermostat: -0.40 to the answer at message 4]",
        ":gray-badge[:material/thermostat: +0.00 to the answer at message 4]",
    ]
    assert expander is not None and kept.id is not None


def test_another_answer_or_a_user_message_shows_no_weights(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    session = answered(store)
    kept_attribution(store, session, [0.1, 2.5, -0.4, 0.0])
    later = open_app_page(store.root, "context", session=session.uuid, message="6")
    assert not later.exception and badges(later) == []
    assert any("The answer at message 6 is not attributed yet" in c.value for c in later.caption)
    question = open_app_page(store.root, "context", session=session.uuid, message="3")
    assert badges(question) == [] and not [e for e in question.expander if e.label.startswith("Why")]
    unlinked = open_app_page(store.root, "context", session=session.uuid)
    assert badges(unlinked) == []


def test_a_new_attribution_shows_without_a_restart(tmp_path: Path) -> None:
    """The page's caches are keyed by the session's attributions folder too."""
    store = Store(tmp_path / "store")
    session = answered(store)
    at = open_app_page(store.root, "context", session=session.uuid, message="4")
    assert badges(at) == []
    kept_attribution(store, session, [0.0, 1.0, 0.0, 0.0])
    at.run()
    assert len(badges(at)) == 4


def test_by_sentence_a_message_shows_its_strongest_sentence_and_the_badge_says_what_it_measures(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "store")
    session = answered(store)
    # the system prompt, the code, the bananas' two sentences (the second the markup), the question
    kept_attribution(store, session, [0.1, 2.5, 0.2, -0.4, 0.0], unit="sentence")
    at = open_app_page(store.root, "context", session=session.uuid, message="4")
    assert not at.exception and not at.error
    figure = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert figure["data"][0]["x"] == ["#0", "#1", "#2.1", "#2.2", "#3"]
    [ranked] = [d.value for d in at.dataframe if "weight" in d.value.columns]
    assert ranked["at"].tolist() == ["#1", "#2.1", "#0", "#3", "#2.2"]
    assert EVIL in ranked["text"].tolist()[-1]  # shown as text in a table cell, never as markup
    assert badges(at)[1:3] == [
        ":red-badge[:material/thermostat: +2.50 to the answer at message 4]",  # one sentence: the message
        ":blue-badge[:material/thermostat: -0.40 to the answer at message 4 (its sentence 2)]",
    ]
    helps = {m.proto.help for m in at.markdown if "-badge[" in m.value}
    assert helps == {
        "What keeping this message adds to the log-odds of the linked answer "
        "(its attribution; by sentence: the sentence of it that moves it most)"
    }


def test_a_regenerated_attributions_badges_say_they_are_similarity(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    session = answered(store)
    kept_attribution(store, session, [0.0, 0.6, 0.0, 0.0], noise=[0.9, 1.0, 1.0])
    at = open_app_page(store.root, "context", session=session.uuid, message="4")
    helps = {m.proto.help for m in at.markdown if "-badge[" in m.value}
    assert len(helps) == 1 and "similarity" in helps.pop()
