"""Planted-fact sessions: a known answer to attribute, for the attribution tests and the
benchmark (issue 29: "a context of N distractor messages and one that holds the fact the
answer repeats").

The session's last answer repeats a secret code that one user message gave, among
distractor notes, each a user message of its own; the planted message is the one the
answer depends on, so an attribution should rank it first. Everything comes from
``random.Random(seed)``: the same arguments give the same session content.
"""

from __future__ import annotations

import random

from soap_core import Context, Message, Session, Store, TextPart

DISTRACTORS = [
    "The library opens at nine.",
    "Bananas are yellow.",
    "The bus is late today.",
    "My cat sleeps a lot.",
    "It rained on Monday.",
    "The shop sells bread.",
    "Tom likes chess.",
    "The river is wide.",
]
"""The notes a planted fact hides among (at most this many distractors a session)."""


def _notes(seed: int, distractors: int) -> tuple[str, list[str], int]:
    """(the code, the notes with the planted one among them, its position)."""
    rng = random.Random(seed)
    code = str(rng.randrange(1000, 9999))
    notes = rng.sample(DISTRACTORS, distractors)
    where = rng.randrange(len(notes) + 1)
    notes.insert(where, f"The secret code is {code}.")
    return code, notes, where


def planted_session(store: Store, seed: int, distractors: int = 4) -> tuple[Session, int]:
    """A session, saved in ``store``, whose last answer repeats a code one user message
    gave, among ``distractors`` other notes, each a user message of its own (the answer
    is written as "The secret code is NNNN.", the one the local model gives); (the
    session, the planted message's display index in the last answer's request: the
    system prompt is 0)."""
    code, notes, where = _notes(seed, distractors)
    context = Context.create("You answer with facts from the conversation.")
    for note in notes:
        context.append(Message.create("user", [TextPart(note)]))
    context.append(Message.create("user", [TextPart("What is the secret code?")]))
    context.append(Message.create("assistant", [TextPart(f"The secret code is {code}.")]))
    session = Session.create("Planted", context)
    store.save_session(session)
    return session, 1 + where


def planted_paragraph(store: Store, seed: int, distractors: int = 4) -> tuple[Session, int]:
    """:func:`planted_session` with every note in one user message, a sentence each, for
    attribution by sentence; (the session, the planted sentence's number in that
    message, from 1). The message is the request's display index 1."""
    code, notes, where = _notes(seed, distractors)
    context = Context.create("You answer with facts from the conversation.")
    context.append(Message.create("user", [TextPart(" ".join(notes))]))
    context.append(Message.create("user", [TextPart("What is the secret code?")]))
    context.append(Message.create("assistant", [TextPart(f"The secret code is {code}.")]))
    session = Session.create("Planted", context)
    store.save_session(session)
    return session, 1 + where
