"""An interaction agent and its execution agents, shaped like OpenPoke.

OpenPoke's interaction agent talks to the user and hands every task to a named execution
agent (``send_message_to_agent``); execution agents do the work with their tools and
report back; the interaction agent tells the user (``send_message_to_user``) or waits
(``wait``). Here each of those agents is an agentic object: the interaction agent keeps
one :class:`ExecutionAgent` per name, and each keeps its own thread, so a name used again
in a later turn continues that agent's session.

OpenPoke reports back asynchronously. An execution agent that tries to report while the
interaction agent's turn is still running (``report_to_interaction_agent``) asks for a
session that is up its own invocation chain: the runtime refuses that (the no-circle
rule), the refusal is recorded, and the report waits in the agent's ``pending_reports``
until :meth:`InteractionAgent.deliver_reports` hands it over after the turn.

The mailbox is a fake Gmail in memory: deterministic data, so the tools' results are
real even when the model's arguments are rough.
"""

from __future__ import annotations

import copy
import dataclasses
import html
import re
from dataclasses import dataclass
from typing import Any

from demo.log_analyzer import bounded_strings, clean_argument, forced_answer, one_line_text
from soap_core.runtime import AgenticObject, ModelSettings, Runtime, Summarize, ToolSpec, tool

MAX_ARGUMENT_LENGTH = 100
"""The longest string a tool of these agents takes (see :func:`bounded_strings`)."""
DEFAULT_WORKING_MEMORY_MAX_TOKENS = 60_000
"""Over this size the interaction agent's session is summarised (its working memory)."""
_QUERY_WORD = re.compile(r"[a-z0-9@.]{3,}")
_QUERY_FILLERS = "the and for from about with emails email find search all any"
_QUERY_STOPWORDS = frozenset(_QUERY_FILLERS.split())


@dataclass(frozen=True)
class Email:
    id: str
    sender: str
    to: str
    subject: str
    body: str
    date: str

    def headline(self) -> dict[str, str]:
        return {"id": self.id, "from": self.sender, "subject": self.subject, "date": self.date}


@dataclass(frozen=True)
class Draft:
    id: str
    to: str
    subject: str
    body: str


SAMPLE_EMAILS = (
    Email(
        "m1",
        "dana@example.com",
        "me@example.com",
        "Team offsite in Lisbon",
        "Hi! The offsite is on Thursday and Friday in Lisbon. Can you join? Please reply by Monday.",
        "2025-06-02",
    ),
    Email(
        "m2",
        "dana@example.com",
        "me@example.com",
        "Offsite agenda draft",
        "Attached is the agenda for the offsite: planning on Thursday, a hike on Friday.",
        "2025-06-05",
    ),
    Email(
        "m3",
        "billing@acme.test",
        "me@example.com",
        "Invoice 2025-117 from Acme",
        "Your invoice of 1,240.00 EUR is due on 30 June.",
        "2025-06-06",
    ),
    Email(
        "m4",
        "sam@example.com",
        "me@example.com",
        "Release 2.4 slipped",
        "The release moves to next week because of the payments timeout bug.",
        "2025-06-07",
    ),
    Email(
        "m5",
        "news@weekly.test",
        "me@example.com",
        "This week in databases",
        "Connection pools, timeouts and how to size them.",
        "2025-06-08",
    ),
    Email(
        "m6",
        "dana@example.com",
        "me@example.com",
        "Re: Team offsite in Lisbon",
        "Flights are booked for everyone who confirmed. Hotel details follow.",
        "2025-06-09",
    ),
)


def agent_slug(name: str) -> str:
    """OpenPoke's file name for an agent: lower case, runs of other characters → ``-``."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "agent"


class Mailbox:
    """A fake, in-memory mailbox: a few emails and the drafts created so far."""

    def __init__(self, emails: tuple[Email, ...] | list[Email] = SAMPLE_EMAILS) -> None:
        self.emails = list(emails)
        self.drafts: list[Draft] = []

    def search(self, query: str, max_results: int = 5) -> list[Email]:
        """Emails containing any word of ``query``, those with most words first."""
        words = {w for w in _QUERY_WORD.findall(query.lower()) if w not in _QUERY_STOPWORDS}

        def score(email: Email) -> int:
            text = f"{email.sender} {email.subject} {email.body}".lower()
            return sum(1 for word in words if word in text)

        hits = [email for email in self.emails if score(email) > 0]
        hits.sort(key=lambda email: (-score(email), email.date), reverse=False)
        return hits[: max(1, min(max_results, 10))]

    def create_draft(self, to: str, subject: str, body: str) -> Draft:
        draft = Draft(f"d{len(self.drafts) + 1}", to, subject, body)
        self.drafts.append(draft)
        return draft


class ExecutionAgent(AgenticObject):
    """One named execution agent: works on the mailbox, reports to the interaction agent."""

    system_prompt = "You are an execution agent: you do the user's email tasks with your tools."
    settings = ModelSettings(max_tokens=128, max_iterations=4)

    def __init__(
        self,
        name: str,
        *,
        mailbox: Mailbox,
        interaction: InteractionAgent | None = None,
        runtime: Runtime | None = None,
        object_id: str | None = None,
    ) -> None:
        super().__init__(runtime=runtime, object_id=object_id)
        self.name = name
        self.thread = agent_slug(name)
        self.requests = 0
        self.actions: list[str] = []
        self.found: list[str] = []
        self.drafts: list[str] = []
        self.pending_reports: list[str] = []
        self._mailbox = mailbox
        self._interaction = interaction

    def system_prompt_hooks(self) -> list[str]:
        return [f"Your name is {self.name!r}. Handle tasks related to: {self.name}."]

    def tools(self) -> list[ToolSpec]:
        return [bounded_strings(spec, MAX_ARGUMENT_LENGTH) for spec in super().tools()]

    @tool
    def search_email(self, query: str, max_results: int = 5) -> list[dict[str, str]] | str:
        """Search the user's email.

        Args:
            query: words to look for in sender, subject and body.
            max_results: the most emails to return.
        """
        query = clean_argument(query)
        hits = self._mailbox.search(query, max_results)
        self.found = [email.id for email in hits]
        self.actions.append(f"search_email({query!r}) found {len(hits)}: {', '.join(self.found) or '-'}")
        return [email.headline() for email in hits] or f"no email matches {query!r}"

    @tool
    def create_draft(self, to: str, subject: str, body: str) -> dict[str, str]:
        """Save a draft email (it is not sent).

        Args:
            to: the recipient's address.
            subject: the subject line.
            body: the text of the email.
        """
        draft = self._mailbox.create_draft(clean_argument(to), clean_argument(subject), clean_argument(body))
        self.drafts.append(draft.id)
        self.actions.append(f"create_draft(to={draft.to!r}) saved {draft.id}")
        return {"draft": draft.id, "to": draft.to, "subject": draft.subject}

    @tool
    def report_to_interaction_agent(self) -> str:
        """Report what you have done so far to the interaction agent, which tells the user."""
        if self._interaction is None:
            return "there is no interaction agent to report to"
        message = "; ".join(self.actions) or "nothing done yet"
        self.pending_reports.append(message)
        self.actions.append("report_to_interaction_agent()")
        # While the interaction agent's turn is running this is refused (no-circle rule):
        # the ActiveSessionError becomes the tool's "[REFUSED] ..." result.
        reply = self._interaction.receive_agent_message(self.name, message)
        self.pending_reports.remove(message)
        return f"delivered; the interaction agent answered: {reply}"

    def handle(self, instructions: str, first_tool: str = "search_email", request: str | None = None) -> str:
        """Invoke this agent on its own thread; ``first_tool`` is the tool its first
        model call must use (code decides, as the model is too small to). ``request``,
        the user's own words, goes along with the instructions: a large interaction
        model would have put what matters of it into the instructions itself."""
        self.requests += 1
        prompt = instructions if request is None else f"{instructions}\n\nThe user asked: {request}"
        return forced_answer(self, prompt, first_tool, self.thread)


class WorkingMemory(AgenticObject):
    """Condenses the interaction agent's older conversation (OpenPoke's working memory);
    used through the runtime's :class:`~soap_core.runtime.Summarize` compaction."""

    system_prompt = "You condense a conversation into a short note: what the user wants, what was done."
    settings = ModelSettings(max_tokens=64)

    def __repr__(self) -> str:  # shown in the interaction agent's recorded state
        return f"WorkingMemory(object_id={self.object_id!r})"


@dataclass(frozen=True)
class _Turn:
    """What the script decided for the turn now running."""

    agent: str
    first_tool: str
    request: str


class InteractionAgent(AgenticObject):
    """Talks to the user and delegates to named :class:`ExecutionAgent` objects.

    With ``working_memory_max_tokens`` its session is summarised by a
    :class:`WorkingMemory` object once it grows past that size, as OpenPoke keeps a
    working-memory summary of its conversation log.
    """

    system_prompt = (
        "You are Poke, the user's assistant. Delegate tasks to execution agents; tell the user results."
    )
    settings = ModelSettings(max_tokens=128, max_iterations=4)

    def __init__(
        self,
        *,
        mailbox: Mailbox | None = None,
        thread: str = "poke-chat",
        working_memory_max_tokens: int = DEFAULT_WORKING_MEMORY_MAX_TOKENS,
        runtime: Runtime | None = None,
        object_id: str | None = None,
    ) -> None:
        super().__init__(runtime=runtime, object_id=object_id)
        self.thread = thread
        self.working_memory_max_tokens = working_memory_max_tokens
        self.roster: list[str] = []
        self.turns = 0
        self.delegations = 0
        self.messages_to_user: list[str] = []
        self.waits: list[str] = []
        self._mailbox = mailbox or Mailbox()
        self._agents: dict[str, ExecutionAgent] = {}
        self._turn: _Turn | None = None
        self._memory = WorkingMemory(runtime=runtime, object_id=f"{self.object_id}.memory")
        # Summarize needs this object's own summarizer, so the hook is set per object.
        self.compaction = Summarize(self._memory, threshold=working_memory_max_tokens, keep_last=2)

    def agent(self, name: str) -> ExecutionAgent:
        """The execution agent called ``name``, created the first time it is named."""
        name = clean_argument(name) or "General"
        if name not in self._agents:
            self._agents[name] = ExecutionAgent(
                name,
                mailbox=self._mailbox,
                interaction=self,
                runtime=self.runtime,
                object_id=f"{self.object_id}.{agent_slug(name)}",
            )
            self.roster.append(name)
        return self._agents[name]

    def tools(self) -> list[ToolSpec]:
        """The class's tools, with short string arguments. Delegation must not fail on a
        malformed call, so ``instructions`` is one line; and during a scripted turn
        ``agent_name`` can only be the agent the script chose, so that the
        grammar-constrained call carries that choice. (Left to itself the small model
        sends the search to the drafting agent. The price: the changed listing makes the
        server evaluate the whole prompt again at the start of each turn.)"""
        specs = [bounded_strings(spec, MAX_ARGUMENT_LENGTH) for spec in super().tools()]
        turn = self._turn
        return [_delegation(spec, turn) if spec.name == "send_message_to_agent" else spec for spec in specs]

    @tool
    def send_message_to_agent(self, agent_name: str, instructions: str) -> dict[str, Any]:
        """Give a task to the execution agent of that name (a new name makes a new agent).

        Args:
            agent_name: the agent's name, e.g. Email Search.
            instructions: what the agent should do.
        """
        agent = self.agent(agent_name)
        turn = self._turn if self._turn is not None and self._turn.agent == agent.name else None
        self.delegations += 1
        done = len(agent.actions)
        reply = agent.handle(
            clean_argument(instructions) or "Do what the user asked.",
            turn.first_tool if turn else "search_email",
            turn.request if turn else None,
        )
        return {"agent": agent.name, "actions": agent.actions[done:], "reply": reply}

    @tool
    def send_message_to_user(self, message: str) -> str:
        """Tell the user something.

        Args:
            message: the text the user sees.
        """
        self.messages_to_user.append(clean_argument(message))
        return "delivered to the user"

    @tool
    def wait(self, reason: str) -> str:
        """Do nothing for now.

        Args:
            reason: why there is nothing to do.
        """
        self.waits.append(clean_argument(reason))
        return "waiting"

    def _frame(self, tag: str, text: str) -> str:
        agents = "\n".join(f'<agent name="{html.escape(name)}" />' for name in self.roster) or "None"
        return f"<active_agents>\n{agents}\n</active_agents>\n\n<{tag}>\n{text.strip()}\n</{tag}>"

    def user_turn(self, text: str, *, delegate_to: str, agent_tool: str = "search_email") -> str:
        """One user message, delegated to ``delegate_to`` whose first call uses
        ``agent_tool``; returns the interaction agent's answer."""
        self.agent(delegate_to)
        self.turns += 1
        prompt = self._frame("new_user_message", text)
        self._turn = _Turn(delegate_to, agent_tool, text)
        try:
            return forced_answer(self, prompt, "send_message_to_agent", self.thread)
        finally:
            self._turn = None

    def receive_agent_message(self, agent_name: str, message: str) -> str:
        """A message from an execution agent, relayed to the user."""
        prompt = self._frame("new_agent_message", f"[{agent_name}] {message}")
        return forced_answer(self, prompt, "send_message_to_user", self.thread)

    def deliver_reports(self) -> int:
        """Hand over the reports the execution agents could not deliver during a turn."""
        delivered = 0
        for agent in self._agents.values():
            while agent.pending_reports:
                self.receive_agent_message(agent.name, agent.pending_reports.pop(0))
                delivered += 1
        return delivered


def _delegation(spec: ToolSpec, turn: _Turn | None) -> ToolSpec:
    parameters = copy.deepcopy(spec.parameters)
    properties = parameters["properties"]
    properties["instructions"] = properties["instructions"] | one_line_text(MAX_ARGUMENT_LENGTH)
    properties["instructions"].pop("maxLength", None)
    if turn is not None:
        properties["agent_name"]["enum"] = [turn.agent]
    return dataclasses.replace(spec, parameters=parameters)
