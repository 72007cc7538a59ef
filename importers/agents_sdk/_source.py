"""Imported Agents SDK sessions as a request source for replay (the ``openai-agents``
entry point, so replay never imports the importer): each call rebuilt as the SDK builds
it (:mod:`importers.agents_sdk._requests`), and re-runs by the SDK's own ``Runner`` when
the app's code is given (:mod:`importers.agents_sdk._code`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from importers.agents_sdk._items import META_KEY, SOURCE, meta_of
from importers.agents_sdk._requests import build_request, model_at, request_for
from replay import Materialized, MaterializeError, call_site
from soap_core import SOURCE_KEY, CallRecord, Context, Message, Session

if TYPE_CHECKING:
    from replay import FrameworkRun


class AgentsSdkSource:
    name = SOURCE
    built = "rebuilt as the OpenAI Agents SDK's Chat Completions model sends it"

    def claims(self, session: Session) -> bool:
        return session.state_data.get(SOURCE_KEY) == SOURCE

    def materialize(
        self, session: Session, context: Context, index: int, calls: Sequence[CallRecord]
    ) -> Materialized:
        site = call_site(session, context, index, calls)
        answer = site.context.messages[site.index] if site.index < len(site.context.messages) else None
        answered = answer is None or (answer.role == "assistant" and META_KEY in (answer.metadata or {}))
        if answer is not None and not answered and site.call is None:
            raise MaterializeError(
                f"message {index} of context {context.id} is a {answer.role} message: "
                "only a model's answer has a call behind it"
            )
        messages = site.context.messages[: site.index]
        request, sent = request_for(session, messages, model_at(site.context, site.index), site.notes)
        agent = meta_of(answer).get("agent") if answer is not None else None
        if agent:
            site.notes.append(f"answered by the agent {agent!r}")
        parameters = {k: v for k, v in request.items() if k not in ("messages", "tools")}
        return site.materialized(session, request, sent, parameters, self.name)

    def build_request(
        self, messages: Sequence[Message], *, model: str | None, parameters: Mapping[str, Any]
    ) -> dict[str, Any]:
        return build_request(messages, model=model, parameters=parameters)

    def rerun_with_code(self, run: FrameworkRun) -> None:
        """Run the app's ``Runner`` from the re-run message (:mod:`importers.agents_sdk._code`)."""
        from importers.agents_sdk._code import rerun_with_code

        rerun_with_code(run)


REQUEST_SOURCE = AgentsSdkSource()
