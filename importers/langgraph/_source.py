"""LangGraph sessions as a request source for replay (found through the
``soapwb.request_sources`` entry point, so replay never imports the importer).

From the file alone a call is rebuilt as ChatOpenAI builds it (:mod:`._messages`): every
message the state held, exactly; the file does not hold the system prompt (added at call
time), the bound tools, the model's parameters, nor the model asked for (the answer
names the one that answered), and the notes say so. With the app's graph (``--graph``),
the import let LangGraph build each call's whole body (:class:`._graph.BodyBuilder`) and
recorded it: the messages the graph sends before the state's (the system prompt), its
tools and parameters come from that record, the state's messages from the context, so
an edited replay is built the same way. Re-runs with the graph (kept in the session as
:data:`replay.FRAMEWORK_CODE_KEY`) run LangGraph's own loop
(:func:`importers.langgraph._graph.rerun_with_graph`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from importers.langgraph._import import SOURCE, STATE_KEY
from importers.langgraph._messages import META_KEY, sent_form
from replay import FrameworkRun, Materialized, MaterializeError, call_site
from soap_core import SOURCE_KEY, CallRecord, Context, Message, Session

MISSING = "the system prompt, the bound tools, the model's parameters and the model asked for"
_HEAD = "_langgraph_head"
"""A parameter (never sent) holding the messages the graph sends before the state's."""


def checkpoint_before(message: Message | None) -> str | None:
    meta = (message.metadata or {}).get(META_KEY) if message is not None else None
    before = meta.get("before") if isinstance(meta, dict) else None
    return str(before) if before else None


def _where(session: Session) -> tuple[Path, str]:
    state = session.state_data.get(STATE_KEY)
    if not isinstance(state, dict) or "db" not in state or "thread" not in state:
        raise MaterializeError(f"session {session.uuid} does not say which LangGraph database it came from")
    return Path(state["db"]), str(state["thread"])


class LangGraphSource:
    name = "langgraph"
    built = "built as ChatOpenAI sends it (a LangGraph thread)"

    def claims(self, session: Session) -> bool:
        return session.state_data.get(SOURCE_KEY) == SOURCE

    def materialize(
        self, session: Session, context: Context, index: int, calls: Sequence[CallRecord]
    ) -> Materialized:
        site = call_site(session, context, index, calls)
        if site.call is None and site.index < len(site.context.messages):
            raise MaterializeError(
                f"message {index} of context {context.id} was not produced by a model call "
                "(only a model node's answer has one)"
            )
        messages = site.context.messages[: site.index]
        recorded = site.call.request if site.call is not None else {}
        chat = [w for m in messages if not m.is_special for w in sent_form(m)]
        sent = recorded.get("messages")
        sent = sent if isinstance(sent, list) else chat
        if sent[len(sent) - len(chat) :] != chat:
            site.notes.append(
                "the graph sent the state's messages otherwise than ChatOpenAI sends them "
                "(trimmed or rewritten by the app): the recorded body is given"
            )
            return site.materialized(session, dict(recorded), list(messages), dict(recorded), self.name)
        parameters = {k: v for k, v in recorded.items() if k != "messages"}
        parameters[_HEAD] = sent[: len(sent) - len(chat)]
        if parameters[_HEAD] or "tools" in recorded:
            site.notes.append("the system prompt, tools and parameters as the app's graph built them")
        else:
            site.notes.append(f"rebuilt from the checkpoints; the file does not hold {MISSING}")
        request = self.build_request(messages, model=recorded.get("model"), parameters=parameters)
        return site.materialized(session, request, list(messages), parameters, self.name)

    def build_request(
        self, messages: Sequence[Message], *, model: str | None, parameters: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The body for ``messages`` (a replay's edited ones): ChatOpenAI's messages, after
        the system messages the graph sent (when it was given) and with its tools and
        parameters."""
        head = parameters.get(_HEAD) or []
        body: dict[str, Any] = {} if model is None else {"model": model}
        body.update({k: v for k, v in parameters.items() if k not in ("model", "messages", "tools", _HEAD)})
        body["messages"] = [*head, *(w for m in messages if not m.is_special for w in sent_form(m))]
        if parameters.get("tools"):
            body["tools"] = parameters["tools"]
        return body

    def rerun_with_code(self, run: FrameworkRun) -> None:
        """Re-run the thread from the re-run message with LangGraph and the app's graph."""
        from importers.langgraph._graph import rerun_with_graph

        db, thread = _where(run.session)
        before = _start_checkpoint(run.session, run.origin, run.found.index)
        if before is None:
            raise MaterializeError(
                f"message {run.found.index} of {run.origin.id} has no checkpoint before it to re-run from"
            )
        rerun_with_graph(run, db, thread, before)


def _start_checkpoint(session: Session, context: Context, index: int) -> str | None:
    """The checkpoint to re-run message ``index`` of ``context`` from: the one before its
    model call. For an answer a re-run made (no checkpoint of the thread holds it), the
    one before the nearest imported answer, up the fork chain: LangGraph's next step
    there is the model node too, and the fork's messages replace the state's
    (``update_state``)."""
    chain: list[list[Message]] = [context.messages[: index + 1]]
    seen = {context.id}
    parent = session.contexts.get(context.origin_context_id or "")
    while parent is not None and parent.id not in seen:
        seen.add(parent.id)
        chain.append(parent.messages)
        parent = session.contexts.get(parent.origin_context_id or "")
    for messages in chain:
        for message in reversed(messages):
            before = checkpoint_before(message)
            if before is not None and message.role == "assistant":
                return before
    return None


REQUEST_SOURCE = LangGraphSource()
