"""A writer process for the live-follow tests: an agent writing to a store while the
workbench has it open (``python -m tests.live_writer STORE``).

It reads one command a line on stdin and answers each on stdout with ``<word> <epoch
seconds> [details]``, the time taken right after the write (or, for ``session``, right
before it), so the test can tell how long the page took to show it:

* ``session``: saves a new session (role ``Livewriter``) with one context → ``saved``;
* ``message TEXT``: appends a user message to its active context, saves → ``appended``;
* ``fork``: forks the active context (its first two messages) and saves → ``forked``;
* ``call``: appends an assistant message, saves, then writes the record of the LLM call
  that produced it → ``called``;
* ``invoke WAIT_FILE``: invokes the ``Waiter`` object through the real runtime (scripted
  answers); its tool prints ``running <session uuid>`` and waits until ``WAIT_FILE``
  exists, then the invocation ends and the writer prints ``invoked``;
* ``quit``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from soap_core import CallRecord, Context, Message, Session, Store, TextPart, write_call
from soap_core.runtime import AgenticObject, ModelSettings, Runtime, tool
from tests.scripted import ScriptedEndpoint, calls, says

ROLE = "Livewriter"
WAIT_POLL_S = 0.05


def tell(*words: object) -> None:
    print(*words, flush=True)


class Waiter(AgenticObject):
    """An agent whose one tool waits for a file: an invocation that runs until told."""

    settings = ModelSettings(max_tokens=16)
    wait_file = ""

    @tool
    def wait_for_release(self) -> str:
        """Wait until the test releases this invocation."""
        tell("running", self._runtime_session_uuid())
        while not Path(self.wait_file).exists():
            time.sleep(WAIT_POLL_S)
        return "released"

    def _runtime_session_uuid(self) -> str:
        [summary] = [s for s in Store(self.runtime.store.root).sessions() if s.role == "Waiter"]
        return summary.uuid


class Writer:
    def __init__(self, root: Path) -> None:
        self.store = Store(root)
        self.session: Session | None = None

    def new_session(self) -> None:
        context = Context.create("You write while the workbench watches.")
        context.append(Message.create("user", [TextPart("the first message")]))
        self.session = Session.create(ROLE, context, thread_id="live")
        tell("saving", time.time(), self.session.uuid)
        self.store.save_session(self.session)
        tell("saved", time.time(), self.session.uuid)

    def append(self, text: str) -> None:
        session = self.current()
        session.active_context.append(Message.create("user", [TextPart(text)]))
        self.store.save_session(session)
        tell("appended", time.time(), text)

    def fork(self) -> None:
        session = self.current()
        child = session.active_context.fork(range(2))
        session.add_context(child)
        self.store.save_session(session)
        tell("forked", time.time(), child.id)

    def call(self) -> None:
        """An answer from the model, saved, then the record of the call that produced it."""
        session = self.current()
        context = session.active_context
        answer = context.append(Message.create("assistant", [TextPart("a live answer")]))
        self.store.save_session(session)
        request = {"model": "m", "messages": [{"role": "user", "content": "a live call"}]}
        record = CallRecord(
            "live-call-1",
            session.uuid,
            ROLE,
            context.id,
            context.message_count - 1,
            request,
            "h",
            message_id=answer.id,
            latency_s=0.42,
        )
        write_call(self.store.session_dir(ROLE, session.uuid), record)
        tell("called", time.time(), record.id)

    def invoke(self, wait_file: str) -> None:
        endpoint = ScriptedEndpoint(calls("wait_for_release", "{}"), says("Released, done."))
        runtime = Runtime(self.store.root, endpoint)  # type: ignore[arg-type]
        waiter = Waiter(runtime=runtime, object_id="waiter")
        waiter.wait_file = wait_file
        waiter.invoke("Wait for the test.", thread="wait", tool_choice="wait_for_release", follow_up="none")
        tell("invoked", time.time())

    def current(self) -> Session:
        if self.session is None:
            raise SystemExit("no session yet: send 'session' first")
        return self.session


def main(root: str) -> None:
    writer = Writer(Path(root))
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "session":
            writer.new_session()
        elif command == "message":
            writer.append(argument)
        elif command == "fork":
            writer.fork()
        elif command == "call":
            writer.call()
        elif command == "invoke":
            writer.invoke(argument)
        elif command == "quit":
            return
        else:
            tell("unknown", command)


if __name__ == "__main__":
    main(sys.argv[1])
